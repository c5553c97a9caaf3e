//! `forget`, an operator's call (tests/regress/sql/lifecycle.sql's forget, and what the SQL
//! backends' idem_forget does to a running claim: they delete the row whatever its state).

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

const LATER: &str =
    "The record is held under a later fence: the call was taken over or claimed again.";

/// A forgotten result is gone: the next begin runs the call again (attempt 1, a new
/// upstream key, a higher fence). Forgetting what is not there answers false, an expired
/// record included (which is removed all the same).
pub async fn a_forgotten_call_runs_again(h: Harness) {
    let sc = h.scope("forget");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let other = claimed(h.begin(&sc, "other", &opts()).await);
    h.complete(&sc, KEY, c.fence, Some(&json!({"id": 1})), true, None)
        .await
        .unwrap();
    assert!(h.forget(&sc, KEY).await.unwrap(), "a live result forgotten");
    assert_eq!(h.lookup(&sc, KEY).await.unwrap(), None);
    let rec = h
        .lookup(&sc, "other")
        .await
        .unwrap()
        .expect("another key kept");
    assert_eq!(rec.fence, other.fence);
    assert_ne!(h.kept(&sc, KEY).await, Some(true), "nothing kept");
    assert!(!h.forget(&sc, KEY).await.unwrap(), "forgotten already");
    let again = claimed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((again.attempt, again.recovered), (1, false));
    assert!(again.fence > c.fence);
    assert_ne!(again.upstream_key, c.upstream_key);

    assert!(!h.forget(&sc, "never").await.unwrap(), "never claimed");

    let brief = BeginOptions {
        ttl: Some(Duration::from_millis(100)),
        ..opts()
    };
    let gone = claimed(h.begin(&sc, "expired", &brief).await);
    h.complete(&sc, "expired", gone.fence, None, true, None)
        .await
        .unwrap();
    let mut deadline = Deadline::new("the record expired", Duration::from_secs(5));
    while h.lookup(&sc, "expired").await.unwrap().is_some() {
        deadline.tick().await;
    }
    assert!(
        !h.forget(&sc, "expired").await.unwrap(),
        "an expired record"
    );
    assert_ne!(
        h.kept(&sc, "expired").await,
        Some(true),
        "removed all the same"
    );

    // Refused as every call refuses a blank scope, before anything is read.
    refused(h.forget(" ", KEY).await, ErrorKind::InvalidArgument);
}

/// A running claim forgotten: its holder has lost it (as after a release), the next begin
/// claims afresh, and from then on the old fence is refused as a later holder's.
pub async fn a_forgotten_claims_holder_has_lost_it(h: Harness) {
    let sc = h.scope("forget-running");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    assert!(h.forget(&sc, KEY).await.unwrap(), "a live claim forgotten");
    holder_finds_no_record(&h, &sc, KEY, c.fence).await;
    assert_eq!(h.lookup(&sc, KEY).await.unwrap(), None, "nothing written");

    let next = claimed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((next.attempt, next.recovered), (1, false));
    assert!(next.fence > c.fence);
    assert_ne!(next.upstream_key, c.upstream_key);
    let e = refused(
        h.complete(&sc, KEY, c.fence, Some(&json!({})), true, None)
            .await,
        ErrorKind::LeaseLost,
    );
    assert_eq!(e.detail(), Some(LATER));
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.fence), (State::InProgress, next.fence));
}

/// A duplicate waiting for a claim that is forgotten claims the call.
pub async fn a_waiting_duplicate_claims_after_a_forget(h: Harness) {
    let sc = h.scope("forget-wait");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let o = BeginOptions {
        wait: Duration::from_secs(60),
        ..opts()
    };
    let waiter = h.begin_waiting(&sc, KEY, o).await;
    assert!(h.forget(&sc, KEY).await.unwrap());
    // Woken by the forget, not by its wait running out.
    let answer = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter still waits after the forget");
    let next = claimed(answer.expect("the waiter's task"));
    assert_eq!((next.attempt, next.recovered), (1, false));
    assert!(next.fence > c.fence);
}
