//! Unresolved calls (0.8.0): a record whose outcome is unknown is not reusable when its ttl
//! ends. A claim whose lease lapsed is taken over past its ttl (recovered, attempt 2, the
//! same upstream key); a mark (`outcome_unknown`, `unrecorded`) is still replayed; purge
//! keeps both; past the unresolved bound the key is claimed afresh
//! (tests/tests/behaviour/unresolved.rs is the SQL API's side).

use std::time::{Duration, SystemTime};

use pg_idempotency_client::marks::Mark;
use pg_idempotency_client::*;

use super::harness::Harness;
use super::support::*;

/// Polls until the store's clock, which is this machine's, passes `at`.
async fn until_past(what: &str, at: SystemTime) {
    let mut deadline = Deadline::new(what, Duration::from_secs(10));
    while SystemTime::now() <= at {
        deadline.tick().await;
    }
}

fn short() -> BeginOptions {
    BeginOptions {
        ttl: Some(Duration::from_millis(600)),
        lease: Some(Duration::from_millis(300)),
        ..opts()
    }
}

/// A holder died holding the claim; past the claim's ttl the next call takes it over with
/// the same upstream key, so the tool's unknown-outcome choice applies.
pub async fn a_lapsed_claim_past_its_ttl_is_taken_over(h: Harness) {
    let sc = h.scope("unresolved-claim");
    let first = claimed(h.begin(&sc, KEY, &short()).await);
    until_past("the crashed claim's ttl", first.expires_at).await;
    assert!(
        h.lookup(&sc, KEY).await.unwrap().is_some(),
        "a lapsed claim was lost at its ttl"
    );
    let again = claimed(h.begin(&sc, KEY, &short()).await);
    assert_eq!((again.attempt, again.recovered), (2, true), "{again:?}");
    assert_eq!(again.upstream_key, first.upstream_key);
    assert!(again.fence > first.fence);
}

/// Both marks outlive the ttl and are replayed; purge keeps them and the lapsed claim.
pub async fn marks_and_lapsed_claims_outlive_the_ttl_and_purge(h: Harness) {
    let sc = h.scope("unresolved-marks");
    let marks = [
        (
            "refused",
            Mark::OutcomeUnknown("taken over: refused".into()),
        ),
        ("unrecorded", Mark::Unrecorded("too large".into())),
    ];
    let mut ends = Vec::new();
    for (key, mark) in &marks {
        let c = claimed(h.begin(&sc, key, &short()).await);
        h.complete(&sc, key, c.fence, Some(&mark.to_response()), true, None)
            .await
            .unwrap();
        ends.push(replayed(h.begin(&sc, key, &opts()).await).expires_at);
    }
    let crashed = claimed(h.begin(&sc, "crashed", &short()).await);
    ends.push(crashed.expires_at);
    for end in ends {
        until_past("the ttls", end).await;
    }
    h.purge().await.unwrap();
    for (key, mark) in &marks {
        let r = replayed(h.begin(&sc, key, &opts()).await);
        assert_eq!(Mark::of(r.response.as_ref()).as_ref(), Some(mark), "{key}");
    }
    assert!(
        h.lookup(&sc, "crashed").await.unwrap().is_some(),
        "purge removed a lapsed claim"
    );
}

/// Past its unresolved bound a lapsed claim is an expired record: claimed afresh.
pub async fn past_the_unresolved_bound_the_key_is_claimed_afresh(h: Harness) {
    let sc = h.scope("unresolved-bound");
    let o = BeginOptions {
        unresolved_ttl: Some(Duration::from_millis(200)),
        ..short()
    };
    let first = claimed(h.begin(&sc, KEY, &o).await);
    until_past("the claim's ttl", first.expires_at).await;
    until_past(
        "the unresolved bound",
        first.lease_until + Duration::from_millis(200),
    )
    .await;
    let fresh = claimed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((fresh.attempt, fresh.recovered), (1, false), "{fresh:?}");
    assert_ne!(fresh.upstream_key, first.upstream_key);
}
