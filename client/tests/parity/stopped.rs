//! A holder that has stopped beating (protocol/src/estimate.rs): with less than a third of
//! the lease it last took left, it is past a renewal the client's heartbeat (every third
//! of the lease) would have made. Its duplicates are told the lease's time left as
//! `retry_after` (a retry then takes the call over or finds it done), not the estimate's
//! floor, and a waiting duplicate stops waiting at once. A holder that beats keeps its
//! duplicates waiting.
//!
//! Ordered by the store's clock (this machine's) and by what the store answers; the only
//! bounds on time are "before the lease ended", which a waiter that waited its whole wait
//! could not meet.

use std::time::{Duration, SystemTime};

use pg_idempotency_client::*;
use pg_idempotency_protocol::estimate::FLOOR_MS;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

/// Rounding: the local stores count whole milliseconds.
const SLACK: Duration = Duration::from_millis(5);

fn leased(lease: Duration) -> BeginOptions {
    BeginOptions {
        lease: Some(lease),
        ..opts()
    }
}

/// Polls until the store's clock has passed `t`.
async fn until_past(t: SystemTime, what: &'static str) {
    let mut deadline = Deadline::new(what, Duration::from_secs(60));
    while SystemTime::now() <= t {
        deadline.tick_every(Duration::from_millis(2)).await;
    }
}

/// Gives `scope` an estimate of about nothing: a call claimed and completed at once. A
/// duplicate of a call running longer is told the floor, unless its holder stopped.
async fn quick_estimate(h: &Harness, scope: &str) {
    let c = claimed(h.begin(scope, "quick", &opts()).await);
    let done = h
        .complete(scope, "quick", c.fence, Some(&json!({})), true, None)
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
}

/// A holder that claimed with a 3 s lease and never extended is stopped once 2 s have
/// passed: its duplicate is told the lease's time left, not the floor its estimate gives.
/// An extension records the new length: a holder that extended to a shorter lease is
/// judged by it.
pub async fn a_stopped_holder_is_given_the_lease_left(h: Harness) {
    if h.estimates_stay_on_their_partition() {
        return;
    }
    let sc = h.scope("stopped-retry");
    quick_estimate(&h, &sc).await;
    let floor = Duration::from_millis(FLOOR_MS);
    let lease = Duration::from_secs(3);

    // Beating: a duplicate early in the lease gets the floor (the estimate is passed).
    let c = claimed(h.begin(&sc, "held", &leased(lease)).await);
    let claimed_at = c.lease_until - lease;
    until_past(claimed_at + Duration::from_millis(50), "past the estimate").await;
    let p = running(h.begin(&sc, "held", &opts()).await);
    assert!(
        p.retry_after.abs_diff(floor) <= Duration::from_millis(1),
        "a holder that beats: {:?} is not the floor",
        p.retry_after
    );

    // Stopped: past two thirds of the lease.
    until_past(
        claimed_at + lease * 2 / 3 + Duration::from_millis(50),
        "two thirds of the lease passed",
    )
    .await;
    let before = SystemTime::now();
    let answer = h.begin(&sc, "held", &opts()).await;
    let after = SystemTime::now();
    let p = running(answer);
    let most = c.lease_until.duration_since(before).unwrap_or_default();
    let least = c.lease_until.duration_since(after).unwrap_or_default();
    assert!(
        p.retry_after <= most + SLACK && p.retry_after + SLACK >= least,
        "a stopped holder: {:?} is not the lease left, {least:?}..{most:?}",
        p.retry_after
    );
    assert!(
        p.retry_after <= lease / 3 + SLACK,
        "{:?} is more than a third of the lease",
        p.retry_after
    );
    let rec = h.lookup(&sc, "held").await.unwrap().unwrap();
    assert_eq!((rec.state, rec.fence), (State::InProgress, c.fence));

    // Claimed with a minute, extended to 3 s at once: 3 s left is all of the lease last
    // taken, so the holder beats (by the claim's minute it would have stopped).
    let c = claimed(
        h.begin(&sc, "extended", &leased(Duration::from_secs(60)))
            .await,
    );
    h.extend(&sc, "extended", c.fence, Some(lease))
        .await
        .unwrap();
    let p = running(h.begin(&sc, "extended", &opts()).await);
    assert!(
        p.retry_after.abs_diff(floor) <= Duration::from_millis(1),
        "extended to 3 s: {:?} is not the floor",
        p.retry_after
    );
}

/// A holder that claimed with a 6 s lease and never extends; a duplicate waiting up to
/// 30 s. The duplicate answers in_progress once the holder has stopped (two thirds of the
/// lease), before the lease ends, told the lease's time left; the holder still holds the
/// call. Before, the duplicate waited out the lease and took the call over.
pub async fn a_waiting_duplicate_of_a_stopped_holder_stops_waiting(h: Harness) {
    let sc = h.scope("stopped-wait");
    let lease = Duration::from_secs(6);
    let c = claimed(h.begin(&sc, KEY, &leased(lease)).await);
    let claimed_at = c.lease_until - lease;
    let o = BeginOptions {
        wait: Duration::from_secs(30),
        ..opts()
    };
    let waiter = h.begin_waiting(&sc, KEY, o).await;
    let answer = waiter.await.expect("the waiter's task");
    let answered = SystemTime::now();
    let p = running(answer);
    assert!(
        answered < c.lease_until,
        "answered {:?} after the lease ended: the wait did not end when the holder stopped",
        answered.duration_since(c.lease_until).unwrap_or_default()
    );
    assert!(
        answered + SLACK >= claimed_at + lease * 2 / 3,
        "answered before two thirds of the lease: the holder had not stopped"
    );
    assert_eq!((p.attempt, p.upstream_key), (1, c.upstream_key));
    let left = c.lease_until.duration_since(answered).unwrap_or_default();
    assert!(
        p.retry_after + SLACK >= left && p.retry_after <= lease / 3 + SLACK,
        "{:?} is not the lease left (at least {left:?}, at most a third of the lease)",
        p.retry_after
    );
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence),
        (State::InProgress, c.fence),
        "the holder still holds the call"
    );
    assert!(rec.lease_until.is_some_and(|l| l > answered));
}

/// A holder that extends every third of its lease (as the heartbeat does) keeps a waiting
/// duplicate waiting past two thirds of the lease, several times over; its completion
/// then answers the duplicate.
pub async fn a_beating_holder_keeps_its_duplicate_waiting(h: Harness) {
    let sc = h.scope("beating-wait");
    let lease = Duration::from_millis(1_500);
    let c = claimed(h.begin(&sc, KEY, &leased(lease)).await);
    let o = BeginOptions {
        wait: Duration::from_secs(30),
        ..opts()
    };
    let waiter = h.begin_waiting(&sc, KEY, o).await;
    let first = c.lease_until - lease;
    // Four beats, one every third of the lease: the holder is past two thirds of its
    // first lease twice over, never past two thirds of its last.
    for beat in 1..=4u32 {
        until_past(first + lease / 3 * beat, "a third of the lease").await;
        assert!(
            !waiter.is_finished(),
            "the waiter stopped before beat {beat}"
        );
        h.extend(&sc, KEY, c.fence, Some(lease)).await.unwrap();
    }
    let done = h
        .complete(&sc, KEY, c.fence, Some(&json!({"beat": 4})), true, None)
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
    let r = replayed(waiter.await.expect("the waiter's task"));
    assert_eq!(r.response, Some(json!({"beat": 4})));
}
