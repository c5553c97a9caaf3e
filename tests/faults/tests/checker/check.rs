//! The checker on hand-written histories: each invariant's violation is reported, and
//! valid histories full of what faults produce (takeovers, retries, lost answers, a new
//! life after a release or an expiry, a failure run again) report nothing. No database.

use pg_idempotency_faults::check::{check, Invariant, Violation};
use pg_idempotency_faults::check_expiry::{EARLY_SLACK_MICROS, OUTLIVED_SLACK_MICROS};
use pg_idempotency_faults::history::{
    Event, FinalRecord, LedgerRow, Observed, Op, Outcome, Poll, Run, SeenRecord,
};
use serde_json::{json, Value};
use uuid::Uuid;

// ---------------------------------------------------------------------------------------
// Building histories: `t` is (invoked, returned) in microseconds.

fn upstream(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn event(process: usize, key: &str, t: (i64, i64), op: Op, outcome: Outcome) -> Event {
    Event {
        process,
        key: key.into(),
        op,
        invoked: t.0,
        returned: Some(t.1),
        outcome,
    }
}

/// An operation whose answer was lost: it may have taken effect any time after `invoked`.
fn lost(process: usize, key: &str, invoked: i64, op: Op) -> Event {
    Event {
        process,
        key: key.into(),
        op,
        invoked,
        returned: None,
        outcome: Outcome::Indeterminate {
            why: "connection reset".into(),
        },
    }
}

/// A claim; attempt > 1 is a takeover of a lapsed lease.
fn claim(p: usize, key: &str, t: (i64, i64), fence: i64, attempt: i32, uk: Uuid) -> Event {
    let outcome = Outcome::Claimed {
        fence,
        attempt,
        recovered: attempt > 1,
        upstream_key: uk,
    };
    event(p, key, t, Op::Begin, outcome)
}

fn in_progress(p: usize, key: &str, t: (i64, i64)) -> Event {
    event(p, key, t, Op::Begin, Outcome::InProgress)
}

fn replay(p: usize, key: &str, t: (i64, i64), succeeded: bool, response: Value) -> Event {
    let outcome = Outcome::Replay {
        succeeded,
        response: Some(response),
    };
    event(p, key, t, Op::Begin, outcome)
}

fn effect(p: usize, key: &str, t: (i64, i64), fence: i64, uk: Uuid) -> Event {
    let op = Op::Effect {
        fence,
        upstream_key: uk,
    };
    event(p, key, t, op, Outcome::Done)
}

fn complete(p: usize, key: &str, t: (i64, i64), fence: i64, response: Value, state: &str) -> Event {
    let outcome = Outcome::Completed {
        state: state.into(),
    };
    event(p, key, t, Op::Complete { fence, response }, outcome)
}

fn complete_refused(p: usize, key: &str, t: (i64, i64), fence: i64, response: Value) -> Event {
    let outcome = Outcome::Failed {
        sqlstate: "IK003".into(),
    };
    event(p, key, t, Op::Complete { fence, response }, outcome)
}

fn complete_lost(p: usize, key: &str, invoked: i64, fence: i64, response: Value) -> Event {
    lost(p, key, invoked, Op::Complete { fence, response })
}

fn release(p: usize, key: &str, t: (i64, i64), fence: i64) -> Event {
    event(p, key, t, Op::Release { fence }, Outcome::Done)
}

fn row(key: &str, fence: i64, uk: Uuid, at: i64) -> LedgerRow {
    LedgerRow {
        key: key.into(),
        fence,
        upstream_key: uk,
        at,
    }
}

fn record(key: &str, state: &str, fence: i64, response: Value) -> FinalRecord {
    FinalRecord {
        key: key.into(),
        state: state.into(),
        fence,
        response: Some(response),
        expires_at: 1_000_000_000,
    }
}

fn run(events: Vec<Event>, ledger: Vec<LedgerRow>, records: Vec<FinalRecord>) -> Run {
    Run {
        events,
        ledger,
        records,
        ttl_micros: None,
        observed: None,
    }
}

fn answer(by: usize) -> Value {
    json!({ "by": by })
}

// ---------------------------------------------------------------------------------------
// Asserting.

fn show(found: &[Violation]) -> String {
    found
        .iter()
        .map(|v| format!("  {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_clean(run: &Run) {
    let found = check(run);
    assert!(
        found.is_empty(),
        "a valid history was reported:\n{}",
        show(&found)
    );
}

/// The checker reports `invariant` on `key`, and nothing but `invariant`: each history
/// below breaks one thing only, so a report of anything else is a false alarm.
fn assert_only(run: &Run, invariant: Invariant, key: &str) {
    let found = check(run);
    assert!(
        found
            .iter()
            .any(|v| v.invariant == invariant && v.key == key),
        "{invariant:?} on {key} not reported; found:\n{}",
        show(&found)
    );
    assert!(
        found.iter().all(|v| v.invariant == invariant),
        "other invariants reported too:\n{}",
        show(&found)
    );
    println!("{}", show(&found));
}

// ---------------------------------------------------------------------------------------
// Valid histories: the checker must stay silent.

/// Key "crash": the holder's completion is lost and it dies; a duplicate sees the call in
/// progress; once the lease lapses a takeover (attempt 2, same upstream key) repeats the
/// effect (the provider dedups it: no second row) and completes, retrying its completion
/// once; the first holder's own retry with its old fence is refused; a replay follows.
fn crash_and_takeover() -> (Vec<Event>, Vec<LedgerRow>, Vec<FinalRecord>) {
    let k = "crash";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        effect(0, k, (11, 20), 1, upstream(1)),
        complete_lost(0, k, 21, 1, answer(0)),
        in_progress(1, k, (30, 40)),
        claim(1, k, (100, 110), 5, 2, upstream(1)),
        effect(1, k, (111, 120), 5, upstream(1)),
        complete_refused(0, k, (115, 125), 1, answer(0)),
        complete(1, k, (121, 130), 5, answer(1), "succeeded"),
        complete(1, k, (131, 140), 5, answer(1), "succeeded"),
        replay(2, k, (150, 160), true, answer(1)),
    ];
    let ledger = vec![row(k, 1, upstream(1), 15)];
    let records = vec![record(k, "succeeded", 5, answer(1))];
    (events, ledger, records)
}

/// Key "unseen": a begin's answer is lost but it claimed; the takeover that follows
/// continues a life no acknowledged claim started, with its upstream key.
fn lost_begin_then_takeover() -> (Vec<Event>, Vec<LedgerRow>, Vec<FinalRecord>) {
    let k = "unseen";
    let events = vec![
        lost(2, k, 0, Op::Begin),
        claim(3, k, (50, 60), 7, 2, upstream(2)),
        effect(3, k, (61, 70), 7, upstream(2)),
        complete(3, k, (71, 80), 7, answer(3), "succeeded"),
    ];
    let ledger = vec![row(k, 7, upstream(2), 65)];
    let records = vec![record(k, "succeeded", 7, answer(3))];
    (events, ledger, records)
}

/// Key "released": a holder releases without acting; the next begin starts a new life
/// (attempt 1, a new upstream key), whose effect is the key's second life's only one.
fn release_then_new_life() -> (Vec<Event>, Vec<LedgerRow>, Vec<FinalRecord>) {
    let k = "released";
    let events = vec![
        claim(4, k, (0, 10), 2, 1, upstream(3)),
        release(4, k, (11, 20), 2),
        claim(5, k, (30, 40), 9, 1, upstream(4)),
        effect(5, k, (41, 50), 9, upstream(4)),
        complete(5, k, (51, 60), 9, answer(5), "succeeded"),
    ];
    let ledger = vec![row(k, 9, upstream(4), 45)];
    let records = vec![record(k, "succeeded", 9, answer(5))];
    (events, ledger, records)
}

/// Key "late": the completion's answer is lost but it took effect: a later begin replays
/// the response only that lost completion sent.
fn lost_completion_that_landed() -> (Vec<Event>, Vec<LedgerRow>, Vec<FinalRecord>) {
    let k = "late";
    let events = vec![
        claim(6, k, (0, 10), 11, 1, upstream(5)),
        effect(6, k, (11, 20), 11, upstream(5)),
        complete_lost(6, k, 21, 11, answer(6)),
        replay(7, k, (50, 60), true, answer(6)),
    ];
    let ledger = vec![row(k, 11, upstream(5), 15)];
    let records = vec![record(k, "succeeded", 11, answer(6))];
    (events, ledger, records)
}

#[test]
fn takeovers_retries_and_lost_answers_are_valid() {
    let mut all = run(Vec::new(), Vec::new(), Vec::new());
    for (events, ledger, records) in [
        crash_and_takeover(),
        lost_begin_then_takeover(),
        release_then_new_life(),
        lost_completion_that_landed(),
    ] {
        all.events.extend(events);
        all.ledger.extend(ledger);
        all.records.extend(records);
    }
    assert_clean(&all);
}

/// A failure is remembered; `return_cached_if_success` runs it again: the same life
/// (upstream key kept, attempt 2, not recovered), completed again with the new fence.
#[test]
fn a_failure_run_again_is_valid() {
    let k = "retry";
    let mut again = claim(1, k, (40, 50), 4, 2, upstream(1));
    again.outcome = Outcome::Claimed {
        fence: 4,
        attempt: 2,
        recovered: false,
        upstream_key: upstream(1),
    };
    let events = vec![
        claim(0, k, (0, 10), 3, 1, upstream(1)),
        complete(0, k, (11, 20), 3, answer(0), "failed"),
        replay(2, k, (25, 30), false, answer(0)),
        again,
        complete(1, k, (51, 60), 4, answer(1), "succeeded"),
        replay(2, k, (70, 80), true, answer(1)),
    ];
    assert_clean(&run(
        events,
        Vec::new(),
        vec![record(k, "succeeded", 4, answer(1))],
    ));
}

/// A completed call, then a fresh claim long after, completed and replayed with its own
/// result: valid once the first result's ttl has passed (the record expired), otherwise
/// a second life while the first is remembered, and a replay that contradicts it.
#[test]
fn a_new_life_needs_the_old_one_expired() {
    let k = "expiry";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        complete(0, k, (11, 20), 1, answer(0), "succeeded"),
        claim(1, k, (2000, 2010), 2, 1, upstream(2)),
        complete(1, k, (2011, 2020), 2, answer(1), "succeeded"),
        replay(2, k, (2030, 2040), true, answer(1)),
    ];
    let records = vec![record(k, "succeeded", 2, answer(1))];
    let mut expiring = run(events, Vec::new(), records);
    expiring.ttl_micros = Some(1000);
    assert_clean(&expiring);

    expiring.ttl_micros = None;
    let found: Vec<Invariant> = check(&expiring).iter().map(|v| v.invariant).collect();
    assert_eq!(
        found,
        [Invariant::I2, Invariant::I4],
        "{}",
        show(&check(&expiring))
    );
}

// ---------------------------------------------------------------------------------------
// I1: at most one accepted effect per key per life.

/// A takeover minted a new upstream key: the provider cannot tell the repeat from a new
/// call and accepts a second effect.
#[test]
fn i1_takeover_with_a_new_upstream_key() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        effect(0, k, (11, 20), 1, upstream(1)),
        complete_lost(0, k, 21, 1, answer(0)),
        claim(1, k, (100, 110), 2, 2, upstream(2)),
        effect(1, k, (111, 120), 2, upstream(2)),
        complete(1, k, (121, 130), 2, answer(1), "succeeded"),
    ];
    let ledger = vec![row(k, 1, upstream(1), 15), row(k, 2, upstream(2), 115)];
    let records = vec![record(k, "succeeded", 2, answer(1))];
    let found = check(&run(events, ledger, records));
    let i1: Vec<&Violation> = found
        .iter()
        .filter(|v| v.invariant == Invariant::I1)
        .collect();
    // Both the extra row (2 effects, 1 life) and the takeover's name are reported.
    assert!(
        i1.iter().any(|v| v.explanation.contains("at most 1 lives")),
        "{}",
        show(&found)
    );
    assert!(
        i1.iter()
            .any(|v| v.explanation.contains("takeover of no life")),
        "{}",
        show(&found)
    );
}

/// An effect under an upstream key that no claim of the key handed out.
#[test]
fn i1_effect_of_no_life() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        effect(0, k, (11, 20), 1, upstream(1)),
        complete(0, k, (21, 30), 1, answer(0), "succeeded"),
    ];
    let ledger = vec![row(k, 1, upstream(1), 15), row(k, 1, upstream(9), 16)];
    let records = vec![record(k, "succeeded", 1, answer(0))];
    assert_only(&run(events, ledger, records), Invariant::I1, k);
}

// ---------------------------------------------------------------------------------------
// I2: acknowledged results are read back identically.

/// The completion was acknowledged, a later begin replays another response (one that a
/// lost completion with a stale fence had sent).
#[test]
fn i2_replay_differs_from_the_acknowledged_result() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        complete_lost(0, k, 11, 1, answer(0)),
        claim(1, k, (100, 110), 2, 2, upstream(1)),
        complete(1, k, (111, 120), 2, answer(1), "succeeded"),
        replay(2, k, (130, 140), true, answer(0)),
    ];
    let records = vec![record(k, "succeeded", 2, answer(1))];
    assert_only(&run(events, Vec::new(), records), Invariant::I2, k);
}

/// A replay of a result no completion sent.
#[test]
fn i2_replay_of_a_result_never_sent() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        complete_lost(0, k, 11, 1, answer(0)),
        replay(1, k, (20, 30), true, answer(7)),
    ];
    let records = vec![record(k, "succeeded", 1, answer(0))];
    assert_only(&run(events, Vec::new(), records), Invariant::I2, k);
}

/// The stored record lost the acknowledged response.
#[test]
fn i2_final_record_differs() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        complete(0, k, (11, 20), 1, answer(0), "succeeded"),
    ];
    let records = vec![record(k, "succeeded", 1, json!({"by": "nobody"}))];
    assert_only(&run(events, Vec::new(), records), Invariant::I2, k);
}

// ---------------------------------------------------------------------------------------
// I3: fences strictly increase per key and are never reused.

/// A takeover that started after the first claim returned got a lower fence: the
/// ledger would refuse the holder that has the call.
#[test]
fn i3_later_claim_with_a_lower_fence() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 5, 1, upstream(1)),
        claim(1, k, (100, 110), 4, 2, upstream(1)),
    ];
    let records = vec![record(k, "in_progress", 5, Value::Null)];
    assert_only(&run(events, Vec::new(), records), Invariant::I3, k);
}

/// One fence handed out on two keys.
#[test]
fn i3_fence_acknowledged_twice() {
    let events = vec![
        claim(0, "a", (0, 10), 5, 1, upstream(1)),
        claim(1, "b", (0, 10), 5, 1, upstream(2)),
    ];
    let records = vec![
        record("a", "in_progress", 5, Value::Null),
        record("b", "in_progress", 5, Value::Null),
    ];
    assert_only(&run(events, Vec::new(), records), Invariant::I3, "b");
}

// ---------------------------------------------------------------------------------------
// I4: no new life while one may be live; one completion per life.

/// The holder's completion was lost; the next begin claims afresh (attempt 1, a new
/// upstream key) instead of replaying, answering in_progress or taking over.
#[test]
fn i4_fresh_claim_after_a_lost_completion() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        effect(0, k, (11, 20), 1, upstream(1)),
        complete_lost(0, k, 21, 1, answer(0)),
        claim(1, k, (100, 110), 2, 1, upstream(2)),
        effect(1, k, (111, 120), 2, upstream(2)),
    ];
    let ledger = vec![row(k, 1, upstream(1), 15), row(k, 2, upstream(2), 115)];
    let records = vec![record(k, "in_progress", 2, Value::Null)];
    assert_only(&run(events, ledger, records), Invariant::I4, k);
}

/// A begin whose answer was lost held the key (another begin saw it in progress), yet a
/// later begin claims afresh.
#[test]
fn i4_fresh_claim_after_in_progress() {
    let k = "k";
    let events = vec![
        lost(0, k, 0, Op::Begin),
        in_progress(1, k, (10, 20)),
        claim(2, k, (30, 40), 3, 1, upstream(3)),
    ];
    let records = vec![record(k, "in_progress", 3, Value::Null)];
    assert_only(&run(events, Vec::new(), records), Invariant::I4, k);
}

/// The first holder and the takeover both completed the same life (their calls
/// overlapped, so this is not a refused stale fence but two results for one call).
#[test]
fn i4_one_life_completed_twice() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        claim(1, k, (20, 30), 2, 2, upstream(1)),
        complete(0, k, (25, 40), 1, answer(0), "succeeded"),
        complete(1, k, (45, 50), 2, answer(1), "succeeded"),
    ];
    let records = vec![record(k, "succeeded", 2, answer(1))];
    assert_only(&run(events, Vec::new(), records), Invariant::I4, k);
}

/// A completion retried with the fence that completed the record must get the stored
/// state back, not another one. The final record cannot agree with both answers: the one
/// it contradicts is reported too (I2).
#[test]
fn i4_retried_completion_changes_state() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        complete(0, k, (11, 20), 1, answer(0), "succeeded"),
        complete(0, k, (21, 30), 1, answer(0), "failed"),
    ];
    let records = vec![record(k, "succeeded", 1, answer(0))];
    let found = check(&run(events, Vec::new(), records));
    let invariants: Vec<Invariant> = found.iter().map(|v| v.invariant).collect();
    assert_eq!(
        invariants,
        [Invariant::I4, Invariant::I2],
        "{}",
        show(&found)
    );
    assert!(
        found[1].explanation.contains("(failed,"),
        "{}",
        show(&found)
    );
}

// ---------------------------------------------------------------------------------------
// I6: a superseded fence is refused.

/// The takeover's claim had returned when the old holder completed: the product must
/// answer IK003, not accept it.
#[test]
fn i6_stale_holder_completed() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        claim(1, k, (100, 110), 2, 2, upstream(1)),
        complete(0, k, (120, 130), 1, answer(0), "succeeded"),
    ];
    let records = vec![record(k, "in_progress", 2, Value::Null)];
    assert_only(&run(events, Vec::new(), records), Invariant::I6, k);
}

// ---------------------------------------------------------------------------------------
// I5: no record outlives expires_at + purge interval + slack, none is purged early. The
// monitor's polls are hand-made: times in microseconds on the server's clock.

const PURGE: i64 = 1_000_000;

fn seen(key: &str, fence: i64, uk: Uuid, state: &str, expires_at: i64) -> SeenRecord {
    SeenRecord {
        key: key.into(),
        owner: "postgres".into(),
        state: state.into(),
        fence,
        attempt: 1,
        upstream_key: uk,
        expires_at,
    }
}

fn poll(at: i64, records: Vec<SeenRecord>) -> Poll {
    Poll { at, records }
}

fn watched(events: Vec<Event>, polls: Vec<Poll>) -> Run {
    let mut r = run(events, Vec::new(), Vec::new());
    r.ttl_micros = Some(1_000_000);
    r.observed = Some(Observed {
        purge_interval_micros: PURGE,
        polls,
    });
    r
}

/// What the product does: a record expires at 1 s, is still there within the purge
/// interval and the slack, then is gone; another is replaced in place by a fresh claim
/// once expired; a third is taken over before it expires (same life, new fence); a fourth
/// is released by its holder long before it expires.
#[test]
fn i5_purges_reclaims_takeovers_and_releases_are_valid() {
    let late = 1_000_000 + PURGE + OUTLIVED_SLACK_MICROS;
    let events = vec![
        claim(0, "d", (0, 10), 4, 1, upstream(4)),
        release(0, "d", (20, 30), 4),
    ];
    let polls = vec![
        poll(
            0,
            vec![
                seen("a", 1, upstream(1), "succeeded", 1_000_000),
                seen("b", 2, upstream(2), "succeeded", 1_000_000),
                seen("c", 3, upstream(3), "in_progress", 5_000_000),
                seen("d", 4, upstream(4), "in_progress", 5_000_000),
            ],
        ),
        poll(
            late,
            vec![
                seen("a", 1, upstream(1), "succeeded", 1_000_000),
                seen("b", 5, upstream(5), "in_progress", late + 1_000_000),
                seen("c", 6, upstream(3), "in_progress", 6_000_000),
            ],
        ),
        poll(
            late + 50_000,
            vec![
                seen("b", 5, upstream(5), "in_progress", late + 1_000_000),
                seen("c", 6, upstream(3), "in_progress", 6_000_000),
            ],
        ),
    ];
    assert_clean(&watched(events, polls));
}

/// A record still stored after its expiry + the purge interval + the slack: the purge did
/// not delete it.
#[test]
fn i5_outlived() {
    let polls = vec![
        poll(0, vec![seen("k", 1, upstream(1), "succeeded", 1_000_000)]),
        poll(
            1_000_000 + PURGE + OUTLIVED_SLACK_MICROS + 1,
            vec![seen("k", 1, upstream(1), "succeeded", 1_000_000)],
        ),
    ];
    assert_only(&watched(Vec::new(), polls), Invariant::I5, "k");
}

/// A record missing from a poll that ran before it expired, with no release: purged early.
#[test]
fn i5_purged_early() {
    let gone_at = 1_000_000 - EARLY_SLACK_MICROS - 1;
    let polls = vec![
        poll(0, vec![seen("k", 1, upstream(1), "succeeded", 1_000_000)]),
        poll(gone_at, Vec::new()),
    ];
    assert_only(&watched(Vec::new(), polls), Invariant::I5, "k");
}

/// A live record replaced by a fresh claim (a new upstream key) before it expired: the
/// old record was dropped early.
#[test]
fn i5_replaced_by_a_new_life_before_expiry() {
    let polls = vec![
        poll(0, vec![seen("k", 1, upstream(1), "succeeded", 2_000_000)]),
        poll(
            500_000,
            vec![seen("k", 2, upstream(2), "in_progress", 1_500_000)],
        ),
    ];
    assert_only(&watched(Vec::new(), polls), Invariant::I5, "k");
}

// ---------------------------------------------------------------------------------------
// A lost claim given back to its repeat (0.3.0 claim tokens).

/// Process 0's begin is lost after the server claimed; process 1 sees the call in progress;
/// process 0's repeat with the same claim token gets the claim back (fence 1, attempt 1)
/// and completes. `repeat_op` is how the history names the repeat.
fn given_back(repeat_op: Op) -> Run {
    let uk = upstream(1);
    let back = Outcome::Claimed {
        fence: 1,
        attempt: 1,
        recovered: false,
        upstream_key: uk,
    };
    run(
        vec![
            lost(0, "k", 0, Op::Begin),
            in_progress(1, "k", (10, 20)),
            event(0, "k", (30, 40), repeat_op, back),
            effect(0, "k", (50, 60), 1, uk),
            complete(0, "k", (70, 80), 1, answer(0), "succeeded"),
        ],
        vec![row("k", 1, uk, 55)],
        vec![record("k", "succeeded", 1, answer(0))],
    )
}

#[test]
fn a_repeat_with_the_claim_token_claimed_when_the_lost_begin_did() {
    assert_clean(&given_back(Op::BeginRepeat));
}

/// The same answer to a begin that is no repeat: a fresh claim after the key was seen held.
#[test]
fn a_fresh_begin_cannot_claim_after_the_key_was_seen_held() {
    assert_only(&given_back(Op::Begin), Invariant::I4, "k");
}

// ---------------------------------------------------------------------------------------
// I2 and I3 on the final records: every acknowledged completion and claim is kept (its
// fence, or a higher one; a completion's fence with its result), unless the run removed
// the row after it or the row may have expired.

fn release_lost(p: usize, key: &str, invoked: i64, fence: i64) -> Event {
    lost(p, key, invoked, Op::Release { fence })
}

fn invariants(found: &[Violation]) -> Vec<(Invariant, String)> {
    let mut all: Vec<(Invariant, String)> =
        found.iter().map(|v| (v.invariant, v.key.clone())).collect();
    all.sort();
    all
}

/// What the product does to a record after an acknowledgement, none of which loses one:
/// a release (acknowledged or lost) and an uncached failure delete the row; a takeover
/// replaces the fence; a cached failure run again and then released leaves no row; a
/// completion whose answer was lost and that never landed leaves the claim in progress.
#[test]
fn rows_removed_or_replaced_by_the_run_are_not_lost() {
    let events = vec![
        claim(0, "released", (0, 10), 1, 1, upstream(1)),
        release(0, "released", (11, 20), 1),
        claim(1, "release_lost", (0, 10), 2, 1, upstream(2)),
        release_lost(1, "release_lost", 11, 2),
        claim(2, "absent", (0, 10), 3, 1, upstream(3)),
        complete(2, "absent", (11, 20), 3, answer(2), "absent"),
        claim(3, "taken_over", (0, 10), 4, 1, upstream(4)),
        complete_lost(3, "taken_over", 11, 4, answer(3)),
        claim(4, "taken_over", (100, 110), 5, 2, upstream(4)),
        complete(4, "taken_over", (111, 120), 5, answer(4), "succeeded"),
        claim(5, "rerun", (0, 10), 6, 1, upstream(6)),
        complete(5, "rerun", (11, 20), 6, answer(5), "failed"),
        claim(6, "rerun", (30, 40), 7, 2, upstream(6)),
        release(6, "rerun", (41, 50), 7),
        claim(7, "held", (0, 10), 8, 1, upstream(8)),
        complete_lost(7, "held", 11, 8, answer(7)),
    ];
    let records = vec![
        record("taken_over", "succeeded", 5, answer(4)),
        record("held", "in_progress", 8, Value::Null),
    ];
    assert_clean(&run(events, Vec::new(), records));
}

/// A completed call and a claim, neither in the final records: valid when records may
/// expire during the run (purged, or the key claimed afresh with a higher fence), lost
/// acknowledgements when nothing expires.
#[test]
fn rows_gone_are_lost_unless_they_may_have_expired() {
    let events = vec![
        claim(0, "done", (0, 10), 1, 1, upstream(1)),
        complete(0, "done", (11, 20), 1, answer(0), "succeeded"),
        claim(1, "held", (0, 10), 2, 1, upstream(2)),
        claim(2, "reclaimed", (0, 10), 3, 1, upstream(3)),
        complete(2, "reclaimed", (11, 20), 3, answer(2), "succeeded"),
        claim(3, "reclaimed", (5000, 5010), 9, 1, upstream(9)),
    ];
    let records = vec![record("reclaimed", "in_progress", 9, Value::Null)];
    let mut expiring = run(events, Vec::new(), records);
    expiring.ttl_micros = Some(1000);
    assert_clean(&expiring);

    expiring.ttl_micros = None;
    let found = check(&expiring);
    let lost_ones: Vec<(Invariant, String)> = invariants(&found)
        .into_iter()
        .filter(|(_, k)| k != "reclaimed")
        .collect();
    assert_eq!(
        lost_ones,
        [
            (Invariant::I2, "done".to_string()),
            (Invariant::I3, "done".to_string()),
            (Invariant::I3, "held".to_string()),
        ],
        "{}",
        show(&found)
    );
    println!("{}", show(&found));
}

/// An acknowledged completion that the server lost (a crash, a failover) on a key nobody
/// touched again: no row at all (the claim lost too), or the row rolled back to the claim.
#[test]
fn i2_acknowledged_completion_lost() {
    let events = vec![
        claim(0, "gone", (0, 10), 1, 1, upstream(1)),
        complete(0, "gone", (11, 20), 1, answer(0), "succeeded"),
        claim(1, "rolled_back", (0, 10), 2, 1, upstream(2)),
        complete(1, "rolled_back", (11, 20), 2, answer(1), "failed"),
    ];
    let records = vec![record("rolled_back", "in_progress", 2, Value::Null)];
    let found = check(&run(events, Vec::new(), records));
    assert_eq!(
        invariants(&found),
        [
            (Invariant::I2, "gone".to_string()),
            (Invariant::I2, "rolled_back".to_string()),
            (Invariant::I3, "gone".to_string()),
        ],
        "{}",
        show(&found)
    );
    println!("{}", show(&found));
}

/// A row deleted before the completion was acknowledged does not explain its absence: the
/// old holder's completion was accepted after the takeover released the call (a stale
/// fence accepted, I6), and no row holds it (I2).
#[test]
fn i2_a_removal_before_the_completion_does_not_explain_it() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        claim(1, k, (20, 30), 2, 2, upstream(1)),
        release(1, k, (31, 40), 2),
        complete(0, k, (50, 60), 1, answer(0), "failed"),
    ];
    let found = check(&run(events, Vec::new(), Vec::new()));
    assert_eq!(
        invariants(&found),
        [
            (Invariant::I2, k.to_string()),
            (Invariant::I6, k.to_string())
        ],
        "{}",
        show(&found)
    );
}

/// An acknowledged claim that the server lost, on a key nobody touched again.
#[test]
fn i3_acknowledged_claim_lost() {
    let k = "k";
    let events = vec![claim(0, k, (0, 10), 1, 1, upstream(1))];
    assert_only(&run(events, Vec::new(), Vec::new()), Invariant::I3, k);
}

/// The row holds a lower fence than an acknowledged claim (the claim was lost and an older
/// row came back): reported even when records may expire, since a key's fence never goes
/// back.
#[test]
fn i3_final_record_with_a_lower_fence() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 6, 1, upstream(1)),
        claim(1, k, (100, 110), 7, 2, upstream(1)),
    ];
    let records = vec![record(k, "in_progress", 6, Value::Null)];
    let mut r = run(events, Vec::new(), records);
    assert_only(&r, Invariant::I3, k);
    r.ttl_micros = Some(1000);
    assert_only(&r, Invariant::I3, k);
}

/// A release with an older fence cannot have deleted the row of a later claim (it is
/// stale and refused): the first claim's row may be gone, the second's is lost.
#[test]
fn i3_a_stale_release_does_not_explain_a_missing_claim() {
    let k = "k";
    let events = vec![
        claim(0, k, (0, 10), 1, 1, upstream(1)),
        release_lost(0, k, 11, 1),
        claim(1, k, (100, 110), 2, 1, upstream(2)),
    ];
    let r = run(events, Vec::new(), Vec::new());
    assert_only(&r, Invariant::I3, k);
    let found = check(&r);
    assert_eq!(found.len(), 1, "{}", show(&found));
    assert!(
        found[0].explanation.contains("claim of fence 2"),
        "{}",
        show(&found)
    );
}
