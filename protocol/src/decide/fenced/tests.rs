//! Every answer of `held`, one row each, and what a completion leaves.

use super::*;
use crate::decide::Read;

const NOW: i64 = 1_000_000_000;

fn record(state: State, fence: i64) -> Read<'static, i64> {
    Read {
        state,
        fence,
        attempt: 1,
        fingerprint: None,
        lease_until: (state == State::InProgress).then_some(NOW + 1),
        expires_at: NOW + 60_000_000,
        claimed_at: NOW - 1,
        claim_token: None,
        unresolved_until: None,
        lease_us: None,
    }
}

/// A case's name, the record, the fence asking, what it asks, and the answer.
type Row<'a> = (
    &'a str,
    Option<&'a Read<'static, i64>>,
    i64,
    Op,
    Result<Holding, Lost>,
);

#[test]
fn each_answer_of_held() {
    use Op::*;
    let running = record(State::InProgress, 5);
    let succeeded = record(State::Succeeded, 5);
    let failed = record(State::Failed, 5);
    let expired = Read {
        expires_at: NOW,
        ..running
    };
    // A lapsed lease alone does not take the record from its holder: only a takeover does.
    let lapsed = Read {
        lease_until: Some(NOW - 1),
        ..running
    };
    #[rustfmt::skip]
    let rows: &[Row] = &[
        ("no record", None, 5, Complete, Err(Lost::Absent)),
        ("an expired record", Some(&expired), 5, Release, Err(Lost::Absent)),
        ("a later fence holds it", Some(&running), 4, Extend, Err(Lost::LaterFence)),
        ("an earlier fence holds it", Some(&running), 6, Complete, Err(Lost::OtherFence)),
        ("another fence holds a completed record", Some(&succeeded), 4, Release, Err(Lost::LaterFence)),
        ("the holder completes", Some(&running), 5, Complete, Ok(Holding::Running)),
        ("the holder releases", Some(&running), 5, Release, Ok(Holding::Running)),
        ("the holder extends", Some(&running), 5, Extend, Ok(Holding::Running)),
        ("the holder of a lapsed lease extends", Some(&lapsed), 5, Extend, Ok(Holding::Running)),
        ("completing a success again keeps it", Some(&succeeded), 5, Complete, Ok(Holding::Completed(Completion::Succeeded))),
        ("completing a failure again keeps it", Some(&failed), 5, Complete, Ok(Holding::Completed(Completion::Failed))),
        ("a completed call is not released", Some(&succeeded), 5, Release, Err(Lost::ReleaseCompleted)),
        ("a completed call is not extended", Some(&failed), 5, Extend, Err(Lost::ExtendCompleted)),
    ];
    for (name, r, fence, op, want) in rows {
        assert_eq!(held(*r, *fence, NOW, *op), *want, "{name}");
    }
}

#[test]
fn an_uncached_failure_leaves_nothing() {
    assert_eq!(completion(true, false), Completion::Succeeded);
    assert_eq!(completion(true, true), Completion::Succeeded);
    assert_eq!(completion(false, true), Completion::Failed);
    assert_eq!(completion(false, false), Completion::Absent);
}

#[test]
fn an_extended_lease_is_never_past_the_expiry() {
    assert_eq!(extended_expiry(NOW + 10, NOW + 20), NOW + 20);
    assert_eq!(extended_expiry(NOW + 30, NOW + 20), NOW + 30);
}
