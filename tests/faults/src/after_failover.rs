//! What a failover may lose, checked directly (on top of check.rs): acknowledgements the
//! promoted server does not hold, and fences it hands out again.
//!
//! The checker's invariants see a lost acknowledgement only when a later operation trips on
//! it (a replay that differs, a second life, a fence repeated); a key whose acknowledged
//! claim or completion vanished and that nobody touched again leaves nothing to trip on.
//! These checks read the final records and the fences on either side of the failover.
//! They assume what the runner in run.rs does: completions report success, no release, and
//! nothing expires during the run (a record, once claimed, is never removed).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;

use crate::check::{Invariant, Violation};
use crate::history::{Event, FinalRecord, Op, Outcome, Run};
use crate::replica::Failover;

/// Acknowledged claims and completions that the final records (read from the promoted
/// server) do not hold: a key whose record is absent or holds a lower fence than a claim
/// acknowledged for it (I3: its fence went back), or does not hold an acknowledged
/// completion's fence and result (I2).
pub fn lost_acknowledgements(run: &Run) -> Vec<Violation> {
    let records: BTreeMap<&str, &FinalRecord> =
        run.records.iter().map(|r| (r.key.as_str(), r)).collect();
    let mut found = Vec::new();
    for e in &run.events {
        let record = records.get(e.key.as_str()).copied();
        match (&e.op, &e.outcome) {
            (Op::Begin | Op::BeginRepeat, Outcome::Claimed { fence, .. })
                if record.is_none_or(|r| r.fence < *fence) =>
            {
                found.push(lost(
                    Invariant::I3,
                    e,
                    format!("the claim of fence {fence}"),
                    record,
                ));
            }
            (Op::Complete { fence, response }, Outcome::Completed { state }) => {
                // A stored result is final until it expires: the record keeps its fence
                // (a later begin replays it, nobody claims it again).
                let held = record.is_some_and(|r| {
                    r.fence == *fence
                        && r.state == *state
                        && r.response.as_ref().unwrap_or(&Value::Null) == response
                });
                if !held {
                    found.push(lost(
                        Invariant::I2,
                        e,
                        format!("the completion ({state}) with fence {fence}"),
                        record,
                    ));
                }
            }
            _ => {}
        }
    }
    found
}

fn lost(invariant: Invariant, e: &Event, what: String, record: Option<&FinalRecord>) -> Violation {
    let now = match record {
        None => "no record".to_string(),
        Some(r) => format!("a record {} with fence {}", r.state, r.fence),
    };
    Violation {
        invariant,
        key: e.key.clone(),
        explanation: format!(
            "{what} was acknowledged by process {} at {} us, but after the failover the \
             server holds {now}",
            e.process,
            e.returned.unwrap_or(e.invoked)
        ),
    }
}

/// Fences handed out again after the failover (I3): every claim invoked after the primary
/// stopped (only the promoted server can answer it) must have a fence above every fence
/// acknowledged before.
/// `started` is an instant taken just before the run started its clock (run.rs starts it
/// first thing): event times are microseconds after the run's start, at most a few
/// microseconds after `started`, so one millisecond of margin places every event on the
/// right side of the failover.
pub fn fences_reissued(run: &Run, started: Instant, failover: &Failover) -> Vec<Violation> {
    let stopped = micros(started, failover.stopped);
    let claims = claims(run);
    // A repeat of a lost begin may give back a claim made before the stop, with its
    // fence: only a fresh begin's fence is new.
    let fresh_after = |e: &Event| e.op == Op::Begin && e.invoked > stopped;
    let before = claims
        .iter()
        .filter(|(e, _)| e.returned.is_some_and(|r| r + MARGIN < stopped))
        .max_by_key(|(_, f)| *f);
    let Some((top, top_fence)) = before else {
        return Vec::new();
    };
    claims
        .iter()
        .filter(|(e, f)| fresh_after(e) && f <= top_fence)
        .map(|(e, f)| Violation {
            invariant: Invariant::I3,
            key: e.key.clone(),
            explanation: format!(
                "fence {f} was handed out after the failover (process {} at {} us), but \
                 fence {top_fence} had been acknowledged before it (key {}, process {})",
                e.process, e.invoked, top.key, top.process
            ),
        })
        .collect()
}

/// How many claims were acknowledged to begins invoked after the primary stopped: the
/// fences [`fences_reissued`] compares (none would make it vacuous).
pub fn claims_after_failover(run: &Run, started: Instant, failover: &Failover) -> usize {
    let stopped = micros(started, failover.stopped);
    claims(run)
        .iter()
        .filter(|(e, _)| e.op == Op::Begin && e.invoked > stopped)
        .count()
}

/// Event times are run-clock microseconds; one millisecond of margin (see
/// [`fences_reissued`]).
const MARGIN: i64 = 1000;

fn micros(started: Instant, t: Instant) -> i64 {
    t.saturating_duration_since(started).as_micros() as i64
}

fn claims(run: &Run) -> Vec<(&Event, i64)> {
    run.events
        .iter()
        .filter_map(|e| match (&e.op, &e.outcome) {
            (Op::Begin | Op::BeginRepeat, Outcome::Claimed { fence, .. }) => Some((e, *fence)),
            _ => None,
        })
        .collect()
}
