//! The direct checks of a failover (after_failover.rs) on hand-written histories: an
//! acknowledged claim or completion missing from the final records, and a fence handed out
//! again after the primary stopped, are reported; a history where the promoted server holds
//! everything reports nothing. No database.

use std::time::{Duration, Instant};

use pg_idempotency_faults::after_failover::{
    claims_after_failover, fences_reissued, lost_acknowledgements,
};
use pg_idempotency_faults::check::Invariant;
use pg_idempotency_faults::history::{Event, FinalRecord, Op, Outcome, Run};
use pg_idempotency_faults::replica::Failover;
use serde_json::json;
use uuid::Uuid;

fn claim(key: &str, t: (i64, i64), fence: i64) -> Event {
    Event {
        process: 0,
        key: key.into(),
        op: Op::Begin,
        invoked: t.0,
        returned: Some(t.1),
        outcome: Outcome::Claimed {
            fence,
            attempt: 1,
            recovered: false,
            upstream_key: Uuid::from_u128(fence as u128),
        },
    }
}

fn complete(key: &str, t: (i64, i64), fence: i64) -> Event {
    Event {
        process: 0,
        key: key.into(),
        op: Op::Complete {
            fence,
            response: json!({"fence": fence}),
        },
        invoked: t.0,
        returned: Some(t.1),
        outcome: Outcome::Completed {
            state: "succeeded".into(),
        },
    }
}

fn record(key: &str, state: &str, fence: i64) -> FinalRecord {
    FinalRecord {
        key: key.into(),
        state: state.into(),
        fence,
        response: (state == "succeeded").then(|| json!({"fence": fence})),
        expires_at: i64::MAX,
    }
}

fn run(events: Vec<Event>, records: Vec<FinalRecord>) -> Run {
    Run {
        events,
        records,
        ..Run::default()
    }
}

/// A failover whose primary stopped 10 ms and was promoted 12 ms after `started`.
fn failover(started: Instant) -> Failover {
    Failover {
        stopped: started + Duration::from_millis(10),
        promoted: started + Duration::from_millis(12),
    }
}

#[test]
fn everything_held_reports_nothing() {
    let r = run(
        vec![
            claim("a", (0, 100), 1),
            complete("a", (200, 300), 1),
            claim("b", (400, 500), 2),
        ],
        vec![record("a", "succeeded", 1), record("b", "in_progress", 2)],
    );
    assert_eq!(lost_acknowledgements(&r), vec![]);
}

#[test]
fn a_lost_completion_is_reported() {
    // The completion was acknowledged, the promoted server has the claim only.
    let r = run(
        vec![claim("a", (0, 100), 1), complete("a", (200, 300), 1)],
        vec![record("a", "in_progress", 1)],
    );
    let found = lost_acknowledgements(&r);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].invariant, Invariant::I2);
    // Claimed again afresh after the failover, with a higher fence: still lost.
    let r = run(
        vec![
            claim("a", (0, 100), 1),
            complete("a", (200, 300), 1),
            claim("a", (20_000, 20_100), 9),
            complete("a", (20_200, 20_300), 9),
        ],
        vec![record("a", "succeeded", 9)],
    );
    let found = lost_acknowledgements(&r);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].invariant, Invariant::I2);
}

#[test]
fn a_lost_claim_is_reported() {
    let r = run(vec![claim("a", (0, 100), 5)], vec![]);
    let found = lost_acknowledgements(&r);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].invariant, Invariant::I3);
    // The key's record went back to a lower fence.
    let r = run(
        vec![claim("a", (0, 100), 5), claim("a", (20_000, 20_100), 3)],
        vec![record("a", "in_progress", 3)],
    );
    assert_eq!(lost_acknowledgements(&r).len(), 1);
}

#[test]
fn a_fence_handed_out_again_after_the_stop_is_reported() {
    let started = Instant::now();
    let f = failover(started);
    // Before the stop (10 ms): fences up to 7; after it: 6 (again below) and 8.
    let events = vec![
        claim("a", (0, 100), 7),
        claim("b", (200, 300), 5),
        claim("c", (11_000, 12_500), 6),
        claim("d", (13_000, 13_100), 8),
    ];
    let r = run(events, vec![]);
    let found = fences_reissued(&r, started, &f);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].invariant, Invariant::I3);
    assert_eq!(found[0].key, "c");
    assert_eq!(claims_after_failover(&r, started, &f), 2);
    // Every fence after the stop above the ones before: nothing.
    let events = vec![claim("a", (0, 100), 7), claim("d", (13_000, 13_100), 8)];
    assert_eq!(fences_reissued(&run(events, vec![]), started, &f), vec![]);
}
