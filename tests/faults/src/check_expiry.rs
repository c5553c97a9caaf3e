//! I5, the expiry invariant: no record outlives `expires_at` + the purge interval + a
//! slack, and none is purged early. Read from what the record monitor saw
//! ([`Run::observed`]); a run without a monitor says nothing about it.
//!
//! What the product does (both backends): a purge (the extension's worker every
//! `pg_idempotency.purge_interval` seconds, or `idem_purge_expired` on a schedule) reads the
//! clock once, then deletes every row whose `expires_at <= now`, whatever its state
//! (completed records and running ones alike), skipping rows locked at that moment (a
//! begin claiming the row again). Besides the purge, a record's row leaves only by
//! `idem_release` / an uncached failed completion (`absent`) / `idem_forget`, and it is
//! replaced in place by a fresh claim once it has expired (a new upstream key: a new life).
//! A takeover of a lapsed lease keeps the row and the upstream key (same life, new fence),
//! and `expires_at` of a row only ever moves later (completion, takeover, extension).
//!
//! So, with polls at server times t0 < t1:
//! - (a) *outlived*: a record seen at t with `expires_at + purge interval + OUTLIVED_SLACK
//!   < t`: the purge should have deleted it (or a begin replaced it) by then;
//! - (b) *purged early*: a life seen at t0 with `expires_at` E, missing at t1 (no row, or
//!   a row of another life), E > t1 + EARLY_SLACK, and no operation of the run could have
//!   removed it: whatever deleted or replaced it saw it live.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use crate::history::{Op, Outcome, Poll, Run, SeenRecord};
use crate::violation::{Invariant, Violation};

/// How much later than `expires_at` + the purge interval a record may still be seen. The
/// purge reads its clock once and deletes what had expired then: a record that expires
/// just after is deleted by the next purge, one interval later, plus however late that
/// purge starts and commits on a loaded machine (the extension's worker naps in 1 s steps
/// and counts the nap, not the time it took; the schedule of `idem_purge_expired` waits its
/// interval after the previous call ended). One second covers that with room on a 2-core
/// machine running the whole run; a purge that stops, or misses rows, goes far beyond it.
pub const OUTLIVED_SLACK_MICROS: i64 = 1_000_000;

/// How much earlier than `expires_at` a record may be missing. None in principle: the
/// monitor's clock is read after its snapshot was taken, and whatever removed the record
/// committed before that snapshot, with its own clock at least `expires_at`. One
/// millisecond for the conversions of timestamps to microseconds on the way.
pub const EARLY_SLACK_MICROS: i64 = 1_000;

/// A record's identity in the storage: its key and owner (the scope is the run's).
type RowId<'a> = (&'a str, &'a str);

/// Every violation of I5 in the run; none when the run had no record monitor.
pub fn i5_expiry(run: &Run) -> Vec<Violation> {
    let Some(observed) = &run.observed else {
        return Vec::new();
    };
    let mut polls: Vec<&Poll> = observed.polls.iter().collect();
    polls.sort_by_key(|p| p.at);
    let mut found = Vec::new();
    let mut outlived: HashSet<Uuid> = HashSet::new();
    let mut before: Option<(&Poll, HashMap<RowId, &SeenRecord>)> = None;
    for poll in polls {
        let now: HashMap<RowId, &SeenRecord> = poll
            .records
            .iter()
            .map(|r| ((r.key.as_str(), r.owner.as_str()), r))
            .collect();
        for r in &poll.records {
            let deadline = r
                .expires_at
                .saturating_add(observed.purge_interval_micros)
                .saturating_add(OUTLIVED_SLACK_MICROS);
            if deadline < poll.at && outlived.insert(r.upstream_key) {
                found.push(violation(
                    r,
                    format!(
                        "outlived: {} still stored at {} (purge interval {} µs)",
                        describe(r),
                        poll.at,
                        observed.purge_interval_micros
                    ),
                ));
            }
        }
        if let Some((t0, seen)) = &before {
            for (id, r) in seen {
                let same_life = now
                    .get(id)
                    .is_some_and(|n| n.upstream_key == r.upstream_key);
                if same_life || r.expires_at <= poll.at.saturating_add(EARLY_SLACK_MICROS) {
                    continue;
                }
                if removable(run, observed_fences(&observed.polls, r), r) {
                    continue;
                }
                let instead = match now.get(id) {
                    Some(n) => format!("replaced by another life, {}", describe(n)),
                    None => "gone".to_string(),
                };
                found.push(violation(
                    r,
                    format!(
                        "purged early: {} seen at {}, {instead} at {}, {} µs before it expired, \
                         and no release or absent completion of it in the run",
                        describe(r),
                        t0.at,
                        poll.at,
                        r.expires_at - poll.at
                    ),
                ));
            }
        }
        before = Some((poll, now));
    }
    found
}

/// The fences the monitor saw in the life of `r` (same key, owner and upstream key).
fn observed_fences(polls: &[Poll], r: &SeenRecord) -> HashSet<i64> {
    polls
        .iter()
        .flat_map(|p| &p.records)
        .filter(|s| s.key == r.key && s.owner == r.owner && s.upstream_key == r.upstream_key)
        .map(|s| s.fence)
        .collect()
}

/// An operation of the run may have deleted the life of `r`: a release (acknowledged or
/// with a lost answer) or an acknowledged `absent` completion, with a fence of that life
/// (the monitor's, or one a claim of that upstream key acknowledged). When it took effect
/// is not compared with the polls (the run's clock and the server's may differ): such an
/// operation anywhere in the run excuses the disappearance.
fn removable(run: &Run, mut fences: HashSet<i64>, r: &SeenRecord) -> bool {
    for e in run.events.iter().filter(|e| e.key == r.key) {
        if let Outcome::Claimed {
            fence,
            upstream_key,
            ..
        } = &e.outcome
        {
            if *upstream_key == r.upstream_key {
                fences.insert(*fence);
            }
        }
    }
    run.events
        .iter()
        .filter(|e| e.key == r.key)
        .any(|e| match (&e.op, &e.outcome) {
            (Op::Complete { fence, .. }, Outcome::Completed { state }) => {
                state == "absent" && fences.contains(fence)
            }
            (Op::Release { fence }, Outcome::Done | Outcome::Indeterminate { .. }) => {
                fences.contains(fence)
            }
            _ => false,
        })
}

fn describe(r: &SeenRecord) -> String {
    format!(
        "record {} of {} ({}, fence {}, attempt {}, upstream {}, expires_at {})",
        r.key,
        r.owner,
        r.state,
        r.fence,
        r.attempt,
        &r.upstream_key.to_string()[..8],
        r.expires_at
    )
}

fn violation(r: &SeenRecord, explanation: String) -> Violation {
    Violation {
        invariant: Invariant::I5,
        key: r.key.clone(),
        explanation,
    }
}
