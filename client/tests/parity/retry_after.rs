//! `retry_after`: what a duplicate is told while another attempt runs the call
//! (protocol/src/estimate.rs): the scope's estimate of a call's claim-to-completion time
//! minus the time the running attempt has run, at least FLOOR_MS, UNKNOWN_MS without an
//! estimate, never past the holder's lease. Samples are made by holding a claim until the
//! store's clock (this machine's) has passed claim + d, then completing it.

use std::time::{Duration, SystemTime};

use pg_idempotency_client::*;
use pg_idempotency_protocol::estimate::{FLOOR_MS, UNKNOWN_MS};
use serde_json::json;

use super::harness::Harness;
use super::support::*;

const MINUTE: Duration = Duration::from_secs(60);
/// Rounding: the local stores count whole milliseconds.
const SLACK: Duration = Duration::from_millis(5);

fn leased(lease: Duration) -> BeginOptions {
    BeginOptions {
        lease: Some(lease),
        ..opts()
    }
}

/// When the claim was made, by the store's clock: its lease ends `lease` after it.
fn claimed_at(c: &Claim, lease: Duration) -> SystemTime {
    c.lease_until - lease
}

/// Polls until the store's clock has passed `t`.
async fn until_past(t: SystemTime, what: &'static str) {
    let mut deadline = Deadline::new(what, Duration::from_secs(10));
    while SystemTime::now() <= t {
        deadline.tick_every(Duration::from_millis(2)).await;
    }
}

/// One sample of at least `d`: a claim held until `d` has passed, then completed as
/// `how` says (succeeded, a cached failure, an uncached failure). Returns an upper bound of
/// the sample: the time from the claim until the completion had answered.
async fn sample(h: &Harness, scope: &str, key: &str, d: Duration, how: Completed) -> Duration {
    let c = claimed(h.begin(scope, key, &leased(MINUTE)).await);
    let at = claimed_at(&c, MINUTE);
    until_past(at + d, "the sample's duration passed").await;
    let (ok, cache) = match how {
        Completed::Succeeded => (true, None),
        Completed::Failed => (false, Some(true)),
        Completed::Absent => (false, Some(false)),
    };
    let done = h
        .complete(scope, key, c.fence, Some(&json!({})), ok, cache)
        .await;
    assert_eq!(done.unwrap(), how);
    between(at, SystemTime::now())
}

/// Without a completed call in the scope: UNKNOWN_MS, or the lease left when it is
/// shorter. A release is no sample.
pub async fn without_an_estimate_unknown_bounded_by_the_lease(h: Harness) {
    let sc = h.scope("retry-unknown");
    let unknown = Duration::from_millis(UNKNOWN_MS);
    claimed(h.begin(&sc, "a", &opts()).await);
    let p = running(h.begin(&sc, "a", &opts()).await);
    assert_eq!(p.retry_after, unknown, "not the lease left (a minute)");

    let released = claimed(h.begin(&sc, "b", &opts()).await);
    until_past(
        claimed_at(&released, MINUTE) + Duration::from_millis(50),
        "a held claim",
    )
    .await;
    h.release(&sc, "b", released.fence).await.unwrap();
    claimed(h.begin(&sc, "c", &opts()).await);
    let p = running(h.begin(&sc, "c", &opts()).await);
    assert_eq!(p.retry_after, unknown, "a release is no sample");

    // A lease shorter than UNKNOWN_MS bounds the answer. On a loaded machine the lease may
    // lapse before the duplicate asks (it is then a takeover, not a duplicate): asked again
    // under a new key, a few times.
    let lease = Duration::from_millis(900);
    let (c, p, before, after) = 'asked: {
        for n in 0..5 {
            let key = format!("d{n}");
            let c = claimed(h.begin(&sc, &key, &leased(lease)).await);
            let before = SystemTime::now();
            let answer = h.begin(&sc, &key, &opts()).await;
            let after = SystemTime::now();
            if let Ok(Begin::Claimed(_)) = answer {
                continue;
            }
            break 'asked (c, running(answer), before, after);
        }
        panic!("every duplicate came after its claim's 900 ms lease had lapsed");
    };
    let (most, least) = (
        between(before, c.lease_until),
        between(after, c.lease_until),
    );
    assert!(
        p.retry_after <= most + SLACK && p.retry_after + SLACK >= least,
        "{:?} is not the lease left, {least:?}..{most:?}",
        p.retry_after
    );
}

/// With an estimate from completed calls: a duplicate of a fresh call is told the
/// estimate less the time the call has run, well below the lease left (a minute) and below
/// UNKNOWN_MS. Each kind of completion makes a sample: one scope each, run side by side.
pub async fn the_estimate_less_the_time_run(h: Harness) {
    if h.estimates_stay_on_their_partition() {
        return;
    }
    let d = Duration::from_millis(300);
    let one = |how: Completed| {
        let (h, sc) = (&h, h.scope(&format!("retry-estimate-{how:?}")));
        async move {
            let upper = sample(h, &sc, "sample", d, how).await;
            let c = claimed(h.begin(&sc, "fresh", &leased(MINUTE)).await);
            let p = running(h.begin(&sc, "fresh", &opts()).await);
            if how == Completed::Absent && !h.samples_uncached_failures() {
                // The PL/pgSQL variant's estimate is read from the records, and an uncached
                // failure leaves none: the scope still has no estimate.
                assert_eq!(p.retry_after, Duration::from_millis(UNKNOWN_MS));
                return;
            }
            let run = between(claimed_at(&c, MINUTE), SystemTime::now());
            // The sample lies in d..upper, and so does the estimate; the call has run up to
            // `run`.
            assert!(
                p.retry_after <= upper + SLACK && p.retry_after + run + SLACK >= d,
                "{how:?}: {:?} is not an estimate in {d:?}..{upper:?} less up to {run:?}",
                p.retry_after
            );
            assert!(
                p.retry_after < Duration::from_millis(UNKNOWN_MS),
                "{how:?}: {:?}: no estimate used",
                p.retry_after
            );
        }
    };
    tokio::join!(
        one(Completed::Succeeded),
        one(Completed::Failed),
        one(Completed::Absent)
    );
}

/// A takeover's time runs from its own claim; a call running past the estimate is told
/// FLOOR_MS; and never more than its lease left.
pub async fn past_the_estimate_the_floor_bounded_by_the_lease(h: Harness) {
    if h.estimates_stay_on_their_partition() {
        return;
    }
    let sc = h.scope("retry-floor");
    let d = Duration::from_millis(400);
    let upper = sample(&h, &sc, "s", d, Completed::Succeeded).await;
    let floor = Duration::from_millis(FLOOR_MS);

    // Taken over after a lease shorter than the estimate: timed from the takeover, the
    // estimate is mostly left; timed from the first claim, less than d - 150 ms would be.
    let lapsing = Duration::from_millis(150);
    let first = claimed(h.begin(&sc, "t", &leased(lapsing)).await);
    until_past(first.lease_until, "the first lease lapsed").await;
    let taken = claimed(h.begin(&sc, "t", &leased(MINUTE)).await);
    assert!(taken.recovered);
    let p = running(h.begin(&sc, "t", &opts()).await);
    let run = between(claimed_at(&taken, MINUTE), SystemTime::now());
    assert!(
        p.retry_after + run + SLACK >= d && p.retry_after <= upper + SLACK,
        "{:?} is not timed from the takeover (ran {run:?})",
        p.retry_after
    );

    let c = claimed(h.begin(&sc, "past", &leased(MINUTE)).await);
    until_past(
        claimed_at(&c, MINUTE) + upper + Duration::from_millis(50),
        "past the estimate",
    )
    .await;
    let p = running(h.begin(&sc, "past", &opts()).await);
    assert!(
        p.retry_after.abs_diff(floor) <= Duration::from_millis(1),
        "{:?} is not the floor",
        p.retry_after
    );

    // Past the estimate with less than the floor left of the lease: the lease left. Asked
    // in the lease's last 60 ms; a machine too slow to ask before it lapsed tries again.
    let lease = Duration::from_millis(upper.as_millis() as u64 + 300);
    for attempt in 0..5 {
        let key = format!("short-{attempt}");
        let c = claimed(h.begin(&sc, &key, &leased(lease)).await);
        until_past(
            c.lease_until - Duration::from_millis(60),
            "the lease's end near",
        )
        .await;
        let before = SystemTime::now();
        match h.begin(&sc, &key, &opts()).await {
            Ok(Begin::InProgress(p)) => {
                let most = c.lease_until.duration_since(before).unwrap_or_default();
                assert!(
                    p.retry_after < floor && p.retry_after <= most + SLACK,
                    "{:?} is not the lease left (at most {most:?})",
                    p.retry_after
                );
                return;
            }
            Ok(Begin::Claimed(_)) => continue,
            other => panic!("expected in_progress, got {other:?}"),
        }
    }
    panic!("every duplicate came after its lease lapsed");
}
