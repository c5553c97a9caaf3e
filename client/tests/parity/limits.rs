//! Argument limits (tests/regress/sql/errors.sql's 22023 part): the same refusals, of the
//! same kind, on every store, none of which writes anything; and the values at the limits
//! accepted.

use std::time::Duration;

use pg_idempotency_client::*;

use super::harness::Harness;
use super::refusals::CASES;
use super::support::*;

/// Every row of the refusals table has its kind on this store, and leaves the record it
/// names (if any) as it was.
pub async fn every_refusal_has_its_kind_and_changes_nothing(h: Harness) {
    for &case in CASES {
        let sc = h.scope("limits");
        let fence = case.setup(&h, &sc).await;
        let before = h.lookup(&sc, KEY).await.unwrap();
        let got = case.provoke(&h, &sc, fence).await;
        let e = got.expect_err(&format!("{case:?} was not refused"));
        assert_eq!(e.kind, case.expected().kind, "{case:?}: {e:?}");
        assert_eq!(
            h.lookup(&sc, KEY).await.unwrap(),
            before,
            "{case:?} changed the record"
        );
    }
}

/// The values at each limit are accepted: a 128-byte scope, a 512-byte key, a ttl of 30
/// days, a lease equal to the ttl, no wait.
pub async fn the_values_at_the_limits_are_accepted(h: Harness) {
    let sc = h.scope("at-limits");
    let scope = format!("{sc}{}", "s".repeat(128 - sc.len()));
    claimed(h.begin(&scope, KEY, &opts()).await);
    assert!(h.lookup(&scope, KEY).await.unwrap().is_some());
    let key = "k".repeat(512);
    let c = claimed(h.begin(&sc, &key, &opts()).await);
    h.extend(&sc, &key, c.fence, Some(Duration::from_secs(3600)))
        .await
        .expect("a lease equal to the ttl");
    h.release(&sc, &key, c.fence).await.unwrap();
    let month = Duration::from_secs(30 * 24 * 3600);
    let o = BeginOptions {
        ttl: Some(month),
        lease: Some(month),
        wait: Duration::ZERO,
        ..opts()
    };
    let c = claimed(h.begin(&sc, "month", &o).await);
    assert_eq!(c.lease_until, c.expires_at);
    assert_in(c.expires_at, month, Duration::from_secs(5));
}
