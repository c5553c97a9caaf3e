//! Every branch of `begin`, one row each, and the values of a take-over.

use std::cell::Cell;

use super::*;
use crate::estimate::{FLOOR_MS, UNKNOWN_MS};

const NOW: i64 = 1_000_000_000;
const SECOND: i64 = 1_000_000;
const FP_A: [u8; 32] = [0xa; 32];
const FP_B: [u8; 32] = [0xb; 32];
const TOKEN: [u8; 16] = [1; 16];
const OTHER_TOKEN: [u8; 16] = [2; 16];

/// A call running for 300 ms under fence 7, attempt 2, with `lease_left` of its lease.
fn running(lease_left: i64) -> Read<'static, i64> {
    Read {
        state: State::InProgress,
        fence: 7,
        attempt: 2,
        fingerprint: Some(&FP_A),
        lease_until: Some(NOW + lease_left),
        expires_at: NOW + 3600 * SECOND,
        claimed_at: NOW - 300_000,
        claim_token: Some(TOKEN),
        unresolved_until: None,
        // Claimed before 0.9.0: the holder's lease length unknown.
        lease_us: None,
    }
}

fn completed(state: State) -> Read<'static, i64> {
    Read {
        state,
        lease_until: None,
        ..running(0)
    }
}

fn expired(r: Read<'static, i64>) -> Read<'static, i64> {
    Read {
        expires_at: NOW,
        ..r
    }
}

/// Past its expiry, but its outcome unknown: kept until its unresolved bound, a minute on.
fn unresolved(r: Read<'static, i64>) -> Read<'static, i64> {
    Read {
        expires_at: NOW,
        unresolved_until: Some(NOW + 60 * SECOND),
        ..r
    }
}

/// Past its unresolved bound too.
fn unresolved_over(r: Read<'static, i64>) -> Read<'static, i64> {
    Read {
        expires_at: NOW - SECOND,
        unresolved_until: Some(NOW),
        ..r
    }
}

fn call() -> Call<'static> {
    Call {
        fingerprint: Some(&FP_A),
        on_cache_hit: OnCacheHit::ReturnCached,
        on_mismatch: OnMismatch::Reject,
        claim_token: Some(OTHER_TOKEN),
    }
}

fn fail_fast() -> Call<'static> {
    Call {
        on_cache_hit: OnCacheHit::FailFast,
        ..call()
    }
}

fn if_success() -> Call<'static> {
    Call {
        on_cache_hit: OnCacheHit::ReturnCachedIfSuccess,
        ..call()
    }
}

fn other_request() -> Call<'static> {
    Call {
        fingerprint: Some(&FP_B),
        ..call()
    }
}

/// One case: its name, the record, the call, what the lazy inputs answer if asked, and the
/// step wanted; every step but in progress and wait is decided without asking them.
struct Row {
    name: &'static str,
    record: Option<Read<'static, i64>>,
    call: Call<'static>,
    wait_left: u64,
    estimate: Option<u64>,
    want: Step<'static>,
}

impl Row {
    fn asks_wait(&self) -> bool {
        matches!(self.want, Step::InProgress { .. } | Step::Wait { .. })
    }

    fn asks_estimate(&self) -> bool {
        matches!(self.want, Step::InProgress { .. })
    }
}

/// A row whose inputs are a wait that is over and no estimate.
fn row(
    name: &'static str,
    record: Option<Read<'static, i64>>,
    call: Call<'static>,
    want: Step<'static>,
) -> Row {
    Row {
        name,
        record,
        call,
        wait_left: 0,
        estimate: None,
        want,
    }
}

fn in_progress(retry_after_us: u64) -> Step<'static> {
    Step::InProgress { retry_after_us }
}

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    let minute = 60 * SECOND;
    let mismatch = Step::Mismatch { stored: &FP_A, given: &FP_B };
    let unknown = in_progress(UNKNOWN_MS * 1000);
    let claiming = Call { claim_token: Some(TOKEN), ..call() };
    vec![
        row("no record", None, call(), Step::Claim),
        row("an expired completed record", Some(expired(completed(State::Succeeded))), call(), Step::Claim),
        row("an expired running record", Some(expired(running(minute))), call(), Step::Claim),
        row("a lapsed claim past its ttl, before its unresolved bound", Some(unresolved(running(-1))), call(), Step::TakeOver { recovered: true }),
        row("a mark past its ttl, before its unresolved bound", Some(unresolved(completed(State::Failed))), call(), Step::Replay),
        row("a lapsed claim past its unresolved bound", Some(unresolved_over(running(-1))), call(), Step::Claim),
        row("an expired record of another request", Some(expired(completed(State::Failed))), other_request(), Step::Claim),
        row("a success is replayed", Some(completed(State::Succeeded)), call(), Step::Replay),
        row("a cached failure is replayed", Some(completed(State::Failed)), call(), Step::Replay),
        row("a success is replayed under return_cached_if_success", Some(completed(State::Succeeded)), if_success(), Step::Replay),
        row("a failure is claimed again under return_cached_if_success", Some(completed(State::Failed)), if_success(), Step::TakeOver { recovered: false }),
        row("fail_fast refuses a success", Some(completed(State::Succeeded)), fail_fast(), Step::RepeatRefused),
        row("fail_fast refuses a failure", Some(completed(State::Failed)), fail_fast(), Step::RepeatRefused),
        row("a lapsed lease is taken over", Some(running(0)), call(), Step::TakeOver { recovered: true }),
        row("a lapsed lease is taken over under fail_fast", Some(running(-SECOND)), fail_fast(), Step::TakeOver { recovered: true }),
        row("a lapsed lease is taken over even by the token that claimed", Some(running(0)), claiming, Step::TakeOver { recovered: true }),
        row("the claiming token gets its claim back", Some(running(minute)), claiming, Step::OwnClaim),
        row("another request is refused", Some(completed(State::Succeeded)), other_request(), mismatch),
        row("another request is refused before the claiming token's claim", Some(running(minute)), Call { claim_token: Some(TOKEN), ..other_request() }, mismatch),
        row("another request is refused before fail_fast", Some(completed(State::Succeeded)), Call { fingerprint: Some(&FP_B), ..fail_fast() }, mismatch),
        row("another request under on_mismatch ignore is the same call", Some(completed(State::Succeeded)), Call { on_mismatch: OnMismatch::Ignore, ..other_request() }, Step::Replay),
        row("a call without a request is compared with nothing", Some(completed(State::Succeeded)), Call { fingerprint: None, ..call() }, Step::Replay),
        row("a record without a request is compared with nothing", Some(Read { fingerprint: None, ..completed(State::Succeeded) }), other_request(), Step::Replay),
        row("a live lease, the wait over, no estimate: in progress", Some(running(minute)), call(), unknown),
        row("no token on either side is not the claiming attempt", Some(Read { claim_token: None, ..running(minute) }), Call { claim_token: None, ..call() }, unknown),
        row("fail_fast answers a running call in progress", Some(running(minute)), fail_fast(), unknown),
        Row { estimate: Some(2_000_000), ..row("the estimate less the 300 ms the attempt has run", Some(running(minute)), call(), in_progress(1_700_000)) },
        Row { estimate: Some(100_000), ..row("an attempt past its estimate: the floor", Some(running(minute)), call(), in_progress(FLOOR_MS * 1000)) },
        Row { estimate: Some(2_000_000), ..row("never past the lease", Some(running(50_000)), call(), in_progress(50_000)) },
        Row {
            wait_left: 250_000,
            ..row("a live lease, the wait not over: wait", Some(running(minute)), call(), Step::Wait { wait_left_us: 250_000, lease_left_us: minute as u64, stops_in_us: minute as u64 })
        },
        Row {
            wait_left: 250_000,
            ..row("a beating holder, the wait not over: wait until it would count as stopped", Some(Read { lease_us: Some(90 * SECOND as u64), ..running(minute) }), call(), Step::Wait { wait_left_us: 250_000, lease_left_us: minute as u64, stops_in_us: 30 * SECOND as u64 })
        },
    ]
}

#[test]
fn each_branch_of_begin() {
    for r in rows() {
        let (waits, estimates) = (Cell::new(0), Cell::new(0));
        let step = begin(
            r.record.as_ref(),
            &r.call,
            NOW,
            || {
                waits.set(waits.get() + 1);
                r.wait_left
            },
            || {
                estimates.set(estimates.get() + 1);
                r.estimate
            },
        );
        assert_eq!(step, r.want, "{}", r.name);
        // Asked exactly when the step depends on them, once.
        assert_eq!(
            waits.get(),
            u32::from(r.asks_wait()),
            "{}: the wait",
            r.name
        );
        assert_eq!(
            estimates.get(),
            u32::from(r.asks_estimate()),
            "{}: the estimate",
            r.name
        );
    }
}

/// A holder with less than a third of its lease left has stopped beating: its duplicate is
/// told the lease's time left at once, waiting or not, and neither the wait nor the
/// estimate is asked; with a third or more left the estimate's rule stands.
#[test]
fn a_holder_that_stopped_beating_ends_the_wait_with_the_lease_left() {
    let lease = 60 * SECOND as u64;
    let stopped = Read {
        lease_us: Some(lease),
        ..running(19 * SECOND)
    };
    for wait_left in [0, 30 * SECOND as u64] {
        let step = begin(
            Some(&stopped),
            &call(),
            NOW,
            || panic!("the wait is not asked"),
            || panic!("the estimate is not asked"),
        );
        assert_eq!(
            step,
            in_progress(19 * SECOND as u64),
            "wait left {wait_left}"
        );
    }
    let beating = Read {
        lease_us: Some(lease),
        ..running(20 * SECOND)
    };
    assert_eq!(
        begin(Some(&beating), &call(), NOW, || 0, || Some(1)),
        in_progress(FLOOR_MS * 1000)
    );
    assert_eq!(
        begin(Some(&beating), &call(), NOW, || 5, || None),
        Step::Wait {
            wait_left_us: 5,
            lease_left_us: 20 * SECOND as u64,
            stops_in_us: 0
        }
    );
}

#[test]
fn works_on_system_time() {
    use std::time::{Duration, SystemTime};
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let r = Read {
        state: State::InProgress,
        fence: 1,
        attempt: 1,
        fingerprint: None,
        lease_until: Some(now + Duration::from_millis(1_500)),
        expires_at: now + Duration::from_secs(3600),
        claimed_at: now - Duration::from_millis(10),
        claim_token: None,
        unresolved_until: None,
        lease_us: None,
    };
    let step = begin(Some(&r), &call(), now, || 0, || Some(2_000_000));
    assert_eq!(
        step,
        Step::InProgress {
            retry_after_us: 1_500_000
        }
    );
    let step = begin(Some(&r), &call(), now, || 7, || None);
    assert_eq!(
        step,
        Step::Wait {
            wait_left_us: 7,
            lease_left_us: 1_500_000,
            stops_in_us: 1_500_000
        }
    );
    let step = begin(
        Some(&r),
        &call(),
        now + Duration::from_secs(2),
        || 0,
        || None,
    );
    assert_eq!(step, Step::TakeOver { recovered: true });
}

#[test]
fn a_take_over_orders_fences_per_key_and_keeps_the_call() {
    let r = running(0);
    let later = NOW + 7200 * SECOND;
    // The shared sequence is behind this key's fence: the key's own order wins.
    let again = take_over(&r, &other_request(), 3, later);
    assert_eq!(
        again,
        Again {
            fence: 8,
            attempt: 3,
            fingerprint: Some(&FP_A[..]),
            expires_at: later
        }
    );
    // The sequence is ahead: it is the fence; an expiry earlier than the record's stays.
    let again = take_over(&r, &call(), 20, NOW + SECOND);
    assert_eq!((again.fence, again.expires_at), (20, r.expires_at));
    // A record without a fingerprint takes the call's.
    let bare = Read {
        fingerprint: None,
        ..r
    };
    assert_eq!(
        take_over(&bare, &other_request(), 1, later).fingerprint,
        Some(&FP_B[..])
    );
    assert_eq!(
        take_over(
            &bare,
            &Call {
                fingerprint: None,
                ..call()
            },
            1,
            later
        )
        .fingerprint,
        None
    );
    // The attempt saturates instead of wrapping.
    let worn = Read {
        attempt: i32::MAX,
        ..r
    };
    assert_eq!(take_over(&worn, &call(), 1, later).attempt, i32::MAX);
}
