//! `wait`: a duplicate waits for a live holder instead of answering in_progress at once.
//! The holder acts only once the waiter is seen waiting (waiting.rs says how, per store).

use std::time::{Duration, Instant};

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

fn waiting() -> BeginOptions {
    BeginOptions {
        wait: Duration::from_secs(10),
        ..opts()
    }
}

/// The holder completes while a duplicate waits: the duplicate gets the replay.
pub async fn a_waiting_duplicate_gets_the_replay(h: Harness) {
    let sc = h.scope("wait");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let waiter = h.begin_waiting(&sc, KEY, waiting()).await;
    let done = h
        .complete(&sc, KEY, c.fence, Some(&json!({"id": 7})), true, None)
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
    let r = replayed(waiter.await.expect("the waiter's task"));
    assert!(r.succeeded);
    assert_eq!(r.response, Some(json!({"id": 7})));
    assert_eq!((r.attempt, r.upstream_key), (1, c.upstream_key));
}

/// The holder releases while a duplicate waits: the duplicate claims the call afresh.
pub async fn a_waiting_duplicate_claims_after_a_release(h: Harness) {
    let sc = h.scope("wait-release");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let waiter = h.begin_waiting(&sc, KEY, waiting()).await;
    h.release(&sc, KEY, c.fence).await.unwrap();
    let next = claimed(waiter.await.expect("the waiter's task"));
    assert_eq!((next.attempt, next.recovered), (1, false));
    assert!(next.fence > c.fence);
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.fence), (State::InProgress, next.fence));
}

/// A wait that runs out while the holder still runs answers in_progress, after the wait.
pub async fn a_wait_that_runs_out_answers_in_progress(h: Harness) {
    let sc = h.scope("wait-out");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let o = BeginOptions { wait, ..opts() };
    let p = running(h.begin(&sc, KEY, &o).await);
    let took = started.elapsed();
    assert!(
        took >= wait,
        "answered after {took:?}, before the wait of {wait:?}"
    );
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    assert_eq!((p.attempt, p.upstream_key), (1, c.upstream_key));
    assert!(p.retry_after > Duration::ZERO);
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!(rec.fence, c.fence, "the holder still holds the call");
}
