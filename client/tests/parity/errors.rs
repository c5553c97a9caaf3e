//! Error words (tests/regress/sql/errors.sql): every refusal of the table has, on every
//! store, the SQL API's kind and message, its detail, and a hint.

use pg_idempotency_client::*;

use super::harness::Harness;
use super::refusals::{Detail, Hint, CASES};

pub async fn every_refusal_has_the_sql_apis_words(h: Harness) {
    for &case in CASES {
        let sc = h.scope("errors");
        let fence = case.setup(&h, &sc).await;
        let e: Error = case
            .provoke(&h, &sc, fence)
            .await
            .expect_err(&format!("{case:?} was not refused"));
        let want = case.expected();
        assert_eq!(e.kind, want.kind, "{case:?}: {e:?}");
        assert_eq!(e.message, want.message, "{case:?}");
        let detail = e
            .detail()
            .unwrap_or_else(|| panic!("{case:?}: no detail: {e:?}"));
        assert!(!detail.trim().is_empty(), "{case:?}: a blank detail");
        match want.detail {
            Detail::Exact(d) => assert_eq!(detail, d, "{case:?}"),
            Detail::StartsWith(p) => assert!(detail.starts_with(p), "{case:?}: {detail:?}"),
        }
        match want.hint {
            Hint::Given => assert!(
                e.hint().is_some_and(|h| !h.trim().is_empty()),
                "{case:?}: no hint: {e:?}"
            ),
        }
    }
}
