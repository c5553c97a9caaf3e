//! Acknowledgements kept: every claim and completion the product acknowledged is still in
//! the records left at the end of the run, or something in the run explains why not.
//!
//! The other checks see a lost acknowledgement only when a later operation trips on it (a
//! replay that differs, a second life, a fence handed out again); a key whose acknowledged
//! claim or completion vanished (a crash, a failover) and that nobody touched again leaves
//! nothing to trip on. These read the final records ([`Run::records`]) directly.
//!
//! What may legitimately change a key's record after an acknowledgement with fence F:
//! - a later claim (a takeover, a fresh claim once the row was removed or expired, a cached
//!   failure run again): its fence is above F (fences come from a sequence, and per key
//!   they only go up), so the record holds a fence >= F;
//! - a release (acknowledged or with a lost answer) or an acknowledged `absent` completion
//!   with a fence >= F, which deletes the row (a lower fence is stale and refused);
//! - expiry, when [`Run::ttl_micros`] says records may expire during the run: the row may
//!   then be gone (purged), or replaced by a fresh claim (a higher fence again).
//!
//! Nothing makes the fence go back: a record with a lower fence than an acknowledged
//! claim or completion of its key is always reported, even where expiry is possible.
//! A completion retried with its own fence is a no-op, and the runners' completions are
//! successes (an unknown completion never leaves the record `absent`), so a record still
//! holding a completion's fence holds its result.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::history::{Event, FinalRecord, Op, Outcome, Run};
use crate::violation::{Invariant, Violation};

/// Every acknowledged claim (I3) and stored completion (I2) that the final records lost.
pub fn acknowledgements_kept(run: &Run) -> Vec<Violation> {
    let mut records: BTreeMap<&str, Vec<&FinalRecord>> = BTreeMap::new();
    for r in &run.records {
        records.entry(r.key.as_str()).or_default().push(r);
    }
    let no_records = Vec::new();
    let mut found = Vec::new();
    for e in &run.events {
        let held = records.get(e.key.as_str()).unwrap_or(&no_records);
        match (&e.op, &e.outcome) {
            (Op::Begin | Op::BeginRepeat, Outcome::Claimed { fence, .. }) => {
                found.extend(i3_claim_kept(run, e, *fence, held));
            }
            (Op::Complete { fence, response }, Outcome::Completed { state })
                if state == "succeeded" || state == "failed" =>
            {
                found.extend(i2_completion_kept(run, e, *fence, state, response, held));
            }
            _ => {}
        }
    }
    found
}

/// A claim of fence F: some record of its key holds F or a higher fence, unless the row
/// may have been deleted after the claim (a release or an `absent` completion with a fence
/// >= F) or may have expired.
fn i3_claim_kept(run: &Run, claim: &Event, fence: i64, held: &[&FinalRecord]) -> Option<Violation> {
    if held.iter().any(|r| r.fence >= fence) {
        return None;
    }
    let gone_by_right =
        held.is_empty() && (run.ttl_micros.is_some() || removed_after(run, claim, |f| f >= fence));
    if gone_by_right {
        return None;
    }
    Some(lost(
        Invariant::I3,
        claim,
        format!("the claim of fence {fence}"),
        held,
    ))
}

/// A stored completion (`succeeded`, or `failed` cached) of fence F: some record of its key
/// holds F with that state and response, or a higher fence (a later claim: a failure run
/// again, a fresh claim after expiry); none at all only if it may have expired, or a later
/// life's row (a fence above F) may have been deleted.
fn i2_completion_kept(
    run: &Run,
    done: &Event,
    fence: i64,
    state: &str,
    response: &Value,
    held: &[&FinalRecord],
) -> Option<Violation> {
    let as_acknowledged = |r: &&&FinalRecord| {
        r.fence > fence
            || (r.fence == fence
                && r.state == state
                && r.response.as_ref().unwrap_or(&Value::Null) == response)
    };
    if held.iter().any(|r| as_acknowledged(&r)) {
        return None;
    }
    let gone_by_right =
        held.is_empty() && (run.ttl_micros.is_some() || removed_after(run, done, |f| f > fence));
    if gone_by_right {
        return None;
    }
    Some(lost(
        Invariant::I2,
        done,
        format!("the completion ({state}, {response}) with fence {fence}"),
        held,
    ))
}

/// A release (acknowledged or with a lost answer) or an acknowledged `absent` completion of
/// the key of `e`, with a fence that `fits`, may have deleted its row after `e` took effect.
fn removed_after(run: &Run, e: &Event, fits: impl Fn(i64) -> bool) -> bool {
    run.events.iter().filter(|x| x.key == e.key).any(|x| {
        let fence = match (&x.op, &x.outcome) {
            (Op::Complete { fence, .. }, Outcome::Completed { state }) if state == "absent" => {
                *fence
            }
            (Op::Release { fence }, Outcome::Done | Outcome::Indeterminate { .. }) => *fence,
            _ => return false,
        };
        // `x` may have taken effect after `e` did: it had not returned when `e` was invoked.
        fits(fence) && x.returned.is_none_or(|r| r > e.invoked)
    })
}

fn lost(invariant: Invariant, e: &Event, what: String, held: &[&FinalRecord]) -> Violation {
    let (now, why) = if held.is_empty() {
        (
            "no record".to_string(),
            "no release or absent completion after it can have deleted the row, and records \
             do not expire during this run",
        )
    } else {
        let now = held
            .iter()
            .map(|r| {
                format!(
                    "a record {} with fence {} and response {}",
                    r.state,
                    r.fence,
                    r.response.as_ref().unwrap_or(&Value::Null)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        (
            now,
            "a key's fence never goes back, and a record keeps its fence's result",
        )
    };
    let when = match e.returned {
        Some(r) => format!("[{}..{}]", e.invoked, r),
        None => format!("[{}..?]", e.invoked),
    };
    Violation {
        invariant,
        key: e.key.clone(),
        explanation: format!(
            "{what} was acknowledged to p{} {when}, but the final records hold {now} ({why})",
            e.process
        ),
    }
}
