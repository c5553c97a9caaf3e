//! Fences: a fence that does not hold the record is refused as lease lost, never a silent
//! no-op, and the refusal changes nothing (tests/regress/sql/errors.sql, IK003).

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

const OTHER: &str = "The record is held under a different fence.";
const LATER: &str =
    "The record is held under a later fence: the call was taken over or claimed again.";
const COMPLETED: &str = "The call was already completed";
const NO_LEASE: &str = "The call was already completed; there is no lease to extend.";

fn lost<T: std::fmt::Debug>(r: Result<T>, detail: &str) {
    let e = refused(r, ErrorKind::LeaseLost);
    let got = e.detail().unwrap_or_default();
    assert!(
        got.starts_with(detail),
        "detail {got:?}, expected {detail:?}"
    );
    assert!(e.hint().is_some_and(|h| !h.is_empty()), "{e:?}");
}

/// A fence that never held the record, a negative one, an absent key, a released record,
/// a completed record released or extended.
pub async fn stale_and_unknown_fences_are_refused(h: Harness) {
    let sc = h.scope("fence");
    let c = claimed(h.begin(&sc, "h1", &opts()).await);
    let held = h.lookup(&sc, "h1").await.unwrap();
    lost(
        h.complete(&sc, "h1", c.fence + 1000, Some(&json!({})), true, None)
            .await,
        OTHER,
    );
    lost(h.extend(&sc, "h1", c.fence + 1000, None).await, OTHER);
    lost(
        h.complete(&sc, "h1", -1, Some(&json!({})), true, None)
            .await,
        LATER,
    );
    lost(h.release(&sc, "h1", -1).await, LATER);
    lost(
        h.complete(&sc, "nobody", 1, Some(&json!({})), true, None)
            .await,
        ABSENT,
    );
    assert_eq!(
        h.lookup(&sc, "h1").await.unwrap(),
        held,
        "a refusal changes nothing"
    );

    h.release(&sc, "h1", c.fence).await.unwrap();
    holder_finds_no_record(&h, &sc, "h1", c.fence).await;

    let c = claimed(h.begin(&sc, "h2", &opts()).await);
    let done = h
        .complete(&sc, "h2", c.fence, Some(&json!({})), true, None)
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
    let completed = h.lookup(&sc, "h2").await.unwrap();
    lost(h.release(&sc, "h2", c.fence).await, COMPLETED);
    lost(h.extend(&sc, "h2", c.fence, None).await, NO_LEASE);
    lost(
        h.complete(&sc, "h2", c.fence + 1, None, true, None).await,
        OTHER,
    );
    let rec = h.lookup(&sc, "h2").await.unwrap();
    assert_eq!(rec, completed);
    let rec = rec.unwrap();
    assert_eq!(
        (rec.state, rec.response),
        (State::Succeeded, Some(json!({})))
    );
}
