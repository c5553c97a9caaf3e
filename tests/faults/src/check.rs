//! The checker: reads a [`Run`] (the history of calls, the ledger's accepted effects and
//! the records left at the end) and reports every place where the product broke one of
//! its invariants.
//!
//! - **I1** at most one accepted effect per key per life of the key (lives are named by
//!   their upstream key, kept across takeovers);
//! - **I2** an acknowledged completion is read back as it was acknowledged, and a replay
//!   only returns what some completion sent; the final records keep it (its fence and
//!   result, or a higher fence) unless something in the run removed it or it may have
//!   expired (see `check_kept.rs`);
//! - **I3** fences acknowledged for a key strictly increase in real-time order, and no
//!   fence is handed out twice; the final records keep every acknowledged claim's fence
//!   or a higher one, with the same exceptions;
//! - **I4** no new life while an earlier one may still hold the key, and one completion
//!   per life;
//! - **I5** no record outlives its `expires_at` by more than the purge interval and a
//!   slack, and none is purged before it (read from what the record monitor saw, when the
//!   run had one: see `check_expiry.rs`);
//! - **I6** an acknowledged operation with a fence that a later claim superseded is a
//!   stale holder that the product should have refused (IK003).
//!
//! Real time: an operation took effect somewhere between its `invoked` and `returned`
//! times; an indeterminate one (no `returned`) may have taken effect at any time from its
//! invocation on, or never. Every check only reports what no such placement explains.
//!
//! Two assumptions, both true of the runner in `run.rs`:
//! - completions report success, so an indeterminate completion can leave the record
//!   succeeded (or failed, cached), never absent: it cannot end a life (only an
//!   acknowledged `absent` completion or a release, acknowledged or indeterminate, can);
//! - records expire only if [`Run::ttl_micros`] says so; when it is `None`, nothing
//!   expires during the run.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use uuid::Uuid;

use crate::history::{Event, LedgerRow, Op, Outcome, Run};
pub use crate::violation::{Invariant, Violation};

/// Every violation of I1-I6 in the run; empty when the run is consistent with them.
pub fn check(run: &Run) -> Vec<Violation> {
    let repeats_read = repeats_as_begins(run);
    let run = repeats_read.as_ref().unwrap_or(run);
    let mut found = Vec::new();
    for h in KeyHistory::split(run) {
        found.extend(i1_effects_per_life(&h));
        found.extend(i2_replays_match_completions(&h));
        found.extend(i2_replays_were_sent(&h));
        let disordered = i3_fences_increase(&h);
        // The next two read the order of claims from their fences; when the fences
        // contradict real time, that order means nothing and I3 says what is wrong.
        if disordered.is_empty() {
            found.extend(i1_lives_named_once(&h));
            found.extend(i4_lives_do_not_overlap(&h));
        }
        found.extend(disordered);
        found.extend(i4_no_fresh_claim_after_a_live_record(&h));
        found.extend(i4_one_completion_per_life(&h));
        found.extend(i6_stale_fences_refused(&h));
    }
    found.extend(i3_fences_unique(run));
    found.extend(crate::check_kept::acknowledgements_kept(run));
    found.extend(crate::check_expiry::i5_expiry(run));
    found
}

/// The run with each [`Op::BeginRepeat`] read as the begin it repeats: a `Begin` invoked
/// when the first of the unanswered begins it repeats was (the same process and key, each
/// with its answer lost, right before it), since the claim it answers may have been made
/// then. None when the run has no repeats.
fn repeats_as_begins(run: &Run) -> Option<Run> {
    if !run.events.iter().any(|e| e.op == Op::BeginRepeat) {
        return None;
    }
    let mut read = run.clone();
    for i in 0..read.events.len() {
        if read.events[i].op != Op::BeginRepeat {
            continue;
        }
        let (process, key) = (read.events[i].process, read.events[i].key.clone());
        let mut invoked = read.events[i].invoked;
        for earlier in read.events[..i]
            .iter()
            .rev()
            .filter(|e| e.process == process)
        {
            let unanswered_begin = matches!(earlier.op, Op::Begin | Op::BeginRepeat)
                && earlier.key == key
                && earlier.is_indeterminate();
            if !unanswered_begin {
                break;
            }
            invoked = invoked.min(earlier.invoked);
        }
        read.events[i].op = Op::Begin;
        read.events[i].invoked = invoked;
    }
    Some(read)
}

// ---------------------------------------------------------------------------------------
// The run, seen one key at a time.

/// A claim as `idem_begin` acknowledged it.
#[derive(Debug, Clone, Copy)]
struct Claim<'a> {
    event: &'a Event,
    fence: i64,
    attempt: i32,
    upstream_key: Uuid,
}

/// A life of a key: the claims that share its upstream key, in fence order.
#[derive(Debug)]
struct Life<'a> {
    upstream_key: Uuid,
    claims: Vec<Claim<'a>>,
}

impl Life<'_> {
    /// A life has at least one claim: it is made of them.
    fn last_claim(&self) -> &Claim<'_> {
        &self.claims[self.claims.len() - 1]
    }

    fn has_fence(&self, fence: i64) -> bool {
        self.claims.iter().any(|c| c.fence == fence)
    }
}

/// Everything the run holds about one key.
struct KeyHistory<'a> {
    key: &'a str,
    /// In invocation order.
    events: Vec<&'a Event>,
    ledger: Vec<&'a LedgerRow>,
    ttl_micros: Option<i64>,
}

impl<'a> KeyHistory<'a> {
    fn split(run: &'a Run) -> Vec<KeyHistory<'a>> {
        let mut keys: BTreeMap<&'a str, KeyHistory<'a>> = BTreeMap::new();
        fn of<'m, 'a>(
            keys: &'m mut BTreeMap<&'a str, KeyHistory<'a>>,
            key: &'a str,
            ttl_micros: Option<i64>,
        ) -> &'m mut KeyHistory<'a> {
            keys.entry(key).or_insert_with(|| KeyHistory {
                key,
                events: Vec::new(),
                ledger: Vec::new(),
                ttl_micros,
            })
        }
        let ttl = run.ttl_micros;
        for e in &run.events {
            of(&mut keys, &e.key, ttl).events.push(e);
        }
        for r in &run.ledger {
            of(&mut keys, &r.key, ttl).ledger.push(r);
        }
        let mut all: Vec<KeyHistory> = keys.into_values().collect();
        for h in &mut all {
            h.events.sort_by_key(|e| (e.invoked, e.process));
        }
        all
    }

    /// Acknowledged claims, in fence order.
    fn claims(&self) -> Vec<Claim<'a>> {
        let mut claims: Vec<Claim> = self.events.iter().filter_map(|e| claim_of(e)).collect();
        claims.sort_by_key(|c| c.fence);
        claims
    }

    /// The lives known from acknowledged claims, ordered by their lowest fence.
    fn lives(&self) -> Vec<Life<'a>> {
        let mut lives: Vec<Life> = Vec::new();
        for c in self.claims() {
            match lives.iter_mut().find(|l| l.upstream_key == c.upstream_key) {
                Some(life) => life.claims.push(c),
                None => lives.push(Life {
                    upstream_key: c.upstream_key,
                    claims: vec![c],
                }),
            }
        }
        lives
    }

    /// Begins whose answer was lost: each may have claimed (fresh or takeover) unseen.
    fn lost_begins(&self) -> impl Iterator<Item = &'a Event> + '_ {
        self.events
            .iter()
            .copied()
            .filter(|e| e.op == Op::Begin && e.is_indeterminate())
    }

    /// A begin whose answer was lost could have claimed before `t`.
    fn lost_begin_before(&self, t: i64) -> Option<&'a Event> {
        self.lost_begins().find(|b| b.invoked < t)
    }

    /// Operations that may have removed the record of the life holding `fence` (any life
    /// when `fence` is None): an acknowledged `absent` completion, a release that was
    /// acknowledged or whose answer was lost.
    fn life_enders(&self) -> impl Iterator<Item = (&'a Event, i64)> + '_ {
        self.events
            .iter()
            .copied()
            .filter_map(|e| match (&e.op, &e.outcome) {
                (Op::Complete { fence, .. }, Outcome::Completed { state }) if state == "absent" => {
                    Some((e, *fence))
                }
                (Op::Release { fence }, Outcome::Done | Outcome::Indeterminate { .. }) => {
                    Some((e, *fence))
                }
                _ => None,
            })
    }

    fn violation(&self, invariant: Invariant, explanation: String) -> Violation {
        Violation {
            invariant,
            key: self.key.to_string(),
            explanation,
        }
    }
}

fn claim_of(e: &Event) -> Option<Claim<'_>> {
    match (&e.op, &e.outcome) {
        (
            Op::Begin,
            Outcome::Claimed {
                fence,
                attempt,
                upstream_key,
                ..
            },
        ) => Some(Claim {
            event: e,
            fence: *fence,
            attempt: *attempt,
            upstream_key: *upstream_key,
        }),
        _ => None,
    }
}

/// An acknowledged completion that stored a result (`succeeded` or `failed`).
struct Stored<'a> {
    event: &'a Event,
    fence: i64,
    response: &'a Value,
    succeeded: bool,
}

fn stored_completions<'a>(h: &KeyHistory<'a>) -> Vec<Stored<'a>> {
    h.events
        .iter()
        .filter_map(|e| match (&e.op, &e.outcome) {
            (Op::Complete { fence, response }, Outcome::Completed { state })
                if state == "succeeded" || state == "failed" =>
            {
                Some(Stored {
                    event: e,
                    fence: *fence,
                    response,
                    succeeded: state == "succeeded",
                })
            }
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Real time.

/// `a` returned before `b` was invoked: `a` took effect first, whatever happened inside.
fn precedes(a: &Event, b: &Event) -> bool {
    a.returned.is_some_and(|r| r < b.invoked)
}

/// The latest time `e` can have taken effect (never, for a lost answer).
fn latest(e: &Event) -> i64 {
    e.returned.unwrap_or(i64::MAX)
}

/// `x` may have taken effect before `y` did.
fn may_precede(x: &Event, y: &Event) -> bool {
    x.invoked < latest(y)
}

fn same_response(read: Option<&Value>, sent: &Value) -> bool {
    read.unwrap_or(&Value::Null) == sent
}

// ---------------------------------------------------------------------------------------
// How events are named in explanations.

fn describe(e: &Event) -> String {
    let when = match e.returned {
        Some(r) => format!("[{}..{}]", e.invoked, r),
        None => format!("[{}..?]", e.invoked),
    };
    let op = match &e.op {
        Op::Begin => "begin".to_string(),
        Op::BeginRepeat => "begin again (the same claim token)".to_string(),
        Op::Complete { fence, response } => format!("complete(fence {fence}, {response})"),
        Op::Release { fence } => format!("release(fence {fence})"),
        Op::Extend { fence } => format!("extend(fence {fence})"),
        Op::Effect {
            fence,
            upstream_key,
        } => format!("effect(fence {fence}, upstream {})", short(upstream_key)),
    };
    let outcome = match &e.outcome {
        Outcome::Claimed {
            fence,
            attempt,
            recovered,
            upstream_key,
        } => format!(
            "claimed fence {fence} attempt {attempt}{} upstream {}",
            if *recovered { " recovered" } else { "" },
            short(upstream_key)
        ),
        Outcome::Replay {
            succeeded,
            response,
        } => format!(
            "replay {} {}",
            if *succeeded { "succeeded" } else { "failed" },
            response.as_ref().unwrap_or(&Value::Null)
        ),
        Outcome::InProgress => "in_progress".to_string(),
        Outcome::Completed { state } => state.clone(),
        Outcome::Done => "done".to_string(),
        Outcome::Failed { sqlstate } => format!("failed {sqlstate}"),
        Outcome::Indeterminate { why } => format!("unknown ({why})"),
    };
    format!("p{} {op} {when} -> {outcome}", e.process)
}

fn describe_row(r: &LedgerRow) -> String {
    format!(
        "ledger row (fence {}, upstream {}, at {})",
        r.fence,
        short(&r.upstream_key),
        r.at
    )
}

fn short(u: &Uuid) -> String {
    u.to_string()[..8].to_string()
}

// ---------------------------------------------------------------------------------------
// I1: at most one accepted effect per key per life.

/// Each ledger row names a life the product started (or may have, through a begin whose
/// answer was lost); a life has at most one row; and there are no more rows than lives.
fn i1_effects_per_life(h: &KeyHistory) -> Vec<Violation> {
    let mut found = Vec::new();
    let claims = h.claims();
    let named: HashSet<Uuid> = claims.iter().map(|c| c.upstream_key).collect();
    let mut rows_of_life: HashMap<Uuid, &LedgerRow> = HashMap::new();
    for row in &h.ledger {
        if !named.contains(&row.upstream_key) && h.lost_begin_before(row.at).is_none() {
            found.push(h.violation(
                Invariant::I1,
                format!(
                    "{} names a life that no claim of the key started",
                    describe_row(row)
                ),
            ));
        }
        if let Some(first) = rows_of_life.insert(row.upstream_key, row) {
            found.push(h.violation(
                Invariant::I1,
                format!(
                    "two accepted effects in one life: {} and {}",
                    describe_row(first),
                    describe_row(row)
                ),
            ));
        }
    }
    let fresh = claims.iter().filter(|c| c.attempt == 1).count();
    let lost = h.lost_begins().count();
    if h.ledger.len() > fresh + lost {
        found.push(h.violation(
            Invariant::I1,
            format!(
                "{} accepted effects but at most {} lives ({fresh} fresh claims, {lost} begins \
                 whose answer was lost): {}",
                h.ledger.len(),
                fresh + lost,
                h.ledger
                    .iter()
                    .map(|r| describe_row(r))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ));
    }
    found
}

/// In fence order, a life's claims are contiguous and its upstream key is minted once: a
/// fresh claim brings a new upstream key, a takeover repeats the one of the claim before
/// it with a higher attempt (the provider dedups on it), and a takeover whose life was
/// never seen is only possible when a begin whose answer was lost could have started it.
fn i1_lives_named_once(h: &KeyHistory) -> Vec<Violation> {
    let mut found = Vec::new();
    let claims = h.claims();
    for (i, c) in claims.iter().enumerate() {
        let earlier = &claims[..i];
        let seen = earlier.iter().find(|e| e.upstream_key == c.upstream_key);
        if c.attempt == 1 {
            if let Some(first) = seen {
                found.push(h.violation(
                    Invariant::I1,
                    format!(
                        "a fresh claim reuses the upstream key of an earlier life: {} then {}",
                        describe(first.event),
                        describe(c.event)
                    ),
                ));
            }
            continue;
        }
        match (earlier.last(), seen) {
            (Some(before), Some(_)) if before.upstream_key != c.upstream_key => {
                found.push(h.violation(
                    Invariant::I1,
                    format!(
                        "a takeover has the upstream key of an older life, not of the life it \
                         took over: {} then {}",
                        describe(before.event),
                        describe(c.event)
                    ),
                ))
            }
            (Some(before), Some(_)) if before.attempt >= c.attempt => found.push(h.violation(
                Invariant::I1,
                format!(
                    "a takeover does not count a new attempt: {} then {}",
                    describe(before.event),
                    describe(c.event)
                ),
            )),
            (_, None) if h.lost_begin_before(latest(c.event)).is_none() => {
                let why = match earlier.last() {
                    Some(before) => format!(
                        "its upstream key differs from the life it took over: {} then {}",
                        describe(before.event),
                        describe(c.event)
                    ),
                    None => format!("no claim started its life: {}", describe(c.event)),
                };
                found.push(h.violation(Invariant::I1, format!("a takeover of no life: {why}")))
            }
            _ => {}
        }
    }
    found
}

// ---------------------------------------------------------------------------------------
// I2: acknowledged results are read back identically.

/// After an acknowledged completion, a replay returns its result, until the result may
/// have changed: it expired, or (a failure) a later claim ran the call again.
fn i2_replays_match_completions(h: &KeyHistory) -> Vec<Violation> {
    let mut found = Vec::new();
    for done in stored_completions(h) {
        for read in &h.events {
            let Outcome::Replay {
                succeeded,
                response,
            } = &read.outcome
            else {
                continue;
            };
            let differs =
                *succeeded != done.succeeded || !same_response(response.as_ref(), done.response);
            // Cheapest test first: the result may have changed only matters if it differs.
            if differs && precedes(done.event, read) && !result_may_have_changed(h, &done, read) {
                found.push(h.violation(
                    Invariant::I2,
                    format!(
                        "a replay differs from the acknowledged completion before it: {} then {}",
                        describe(done.event),
                        describe(read)
                    ),
                ));
            }
        }
    }
    found
}

/// The result of `done` may have been replaced before `read` took effect: it expired, or
/// it was a failure and a later claim (acknowledged or lost) may have run the call again.
fn result_may_have_changed(h: &KeyHistory, done: &Stored, read: &Event) -> bool {
    let expired = h
        .ttl_micros
        .is_some_and(|ttl| done.event.invoked.saturating_add(ttl) <= latest(read));
    let run_again = !done.succeeded
        && h.events.iter().any(|e| {
            let reclaim = match claim_of(e) {
                Some(c) => c.fence > done.fence,
                None => e.op == Op::Begin && e.is_indeterminate(),
            };
            reclaim && may_precede(e, read) && latest(e) > done.event.invoked
        });
    expired || run_again
}

/// A replay returns a response that some completion of the key sent (acknowledged as
/// `succeeded`/`failed` with the same flag, or with a lost answer) before it returned.
fn i2_replays_were_sent(h: &KeyHistory) -> Vec<Violation> {
    let mut found = Vec::new();
    for read in &h.events {
        let Outcome::Replay {
            succeeded,
            response,
        } = &read.outcome
        else {
            continue;
        };
        let sent = h.events.iter().any(|c| {
            let Op::Complete { response: sent, .. } = &c.op else {
                return false;
            };
            let flag_fits = match &c.outcome {
                Outcome::Completed { state } => {
                    (state == "succeeded" && *succeeded) || (state == "failed" && !*succeeded)
                }
                Outcome::Indeterminate { .. } => true,
                _ => false,
            };
            flag_fits && may_precede(c, read) && same_response(response.as_ref(), sent)
        });
        if !sent {
            found.push(h.violation(
                Invariant::I2,
                format!(
                    "a replay returns a result no completion of the key sent: {}",
                    describe(read)
                ),
            ));
        }
    }
    found
}

// ---------------------------------------------------------------------------------------
// I3: fences strictly increase per key and are never reused.

/// A claim that returned before another was invoked has the lower fence.
fn i3_fences_increase(h: &KeyHistory) -> Vec<Violation> {
    let mut by_return = h.claims();
    by_return.sort_by_key(|c| latest(c.event));
    // highest[i]: the claim with the highest fence among the first i + 1 to return.
    let mut highest: Vec<Claim> = Vec::with_capacity(by_return.len());
    for c in &by_return {
        let top = match highest.last() {
            Some(h) if h.fence >= c.fence => *h,
            _ => *c,
        };
        highest.push(top);
    }
    let mut found = Vec::new();
    for c in &by_return {
        let returned_before = by_return.partition_point(|e| latest(e.event) < c.event.invoked);
        if returned_before == 0 {
            continue;
        }
        let top = highest[returned_before - 1];
        if top.fence >= c.fence {
            found.push(h.violation(
                Invariant::I3,
                format!(
                    "a later claim got a fence not above an earlier one: {} then {}",
                    describe(top.event),
                    describe(c.event)
                ),
            ));
        }
    }
    found
}

/// No fence value is acknowledged twice, on any key.
fn i3_fences_unique(run: &Run) -> Vec<Violation> {
    let mut first: HashMap<i64, &Event> = HashMap::new();
    let mut found = Vec::new();
    for e in &run.events {
        let Some(c) = claim_of(e) else { continue };
        if let Some(other) = first.insert(c.fence, e) {
            found.push(Violation {
                invariant: Invariant::I3,
                key: e.key.clone(),
                explanation: format!(
                    "fence {} acknowledged twice: {} on key {} and {} on key {}",
                    c.fence,
                    describe(other),
                    other.key,
                    describe(e),
                    e.key
                ),
            });
        }
    }
    found
}

// ---------------------------------------------------------------------------------------
// I4: no new life while one may be live; one completion per life.

/// A life starts only once the one before it (in fence order) may have ended before the
/// new life's first known claim: released, completed as absent, or expired.
fn i4_lives_do_not_overlap(h: &KeyHistory) -> Vec<Violation> {
    let lives = h.lives();
    lives
        .windows(2)
        .filter(|pair| !may_have_ended_before(h, &pair[0], pair[1].claims[0].event))
        .map(|pair| {
            h.violation(
                Invariant::I4,
                format!(
                    "a new life began while the earlier one was still held (no release, no \
                     absent completion, no expiry in between): {} then {}",
                    describe(pair[0].last_claim().event),
                    describe(pair[1].claims[0].event)
                ),
            )
        })
        .collect()
}

/// The record of `life` may have been removed before `next` took effect.
fn may_have_ended_before(h: &KeyHistory, life: &Life, next: &Event) -> bool {
    let removed = h
        .life_enders()
        .any(|(e, fence)| life.has_fence(fence) && may_precede(e, next));
    removed || may_have_expired_before(h, life, next)
}

/// With a ttl, a life expires no earlier than `ttl` after its last claim or completion
/// (an extension pushes the expiry out by a lease, which the run does not record: leaving
/// extensions out can only make an expiry look possible, never hide one).
fn may_have_expired_before(h: &KeyHistory, life: &Life, next: &Event) -> bool {
    let Some(ttl) = h.ttl_micros else {
        return false;
    };
    h.events
        .iter()
        .filter(|e| match (&e.op, &e.outcome) {
            (Op::Begin, Outcome::Claimed { fence, .. })
            | (Op::Complete { fence, .. }, Outcome::Completed { .. }) => life.has_fence(*fence),
            _ => false,
        })
        .all(|e| e.invoked.saturating_add(ttl) < latest(next))
}

/// A begin that answered `in_progress` or `replay` saw a record; a fresh claim
/// (attempt 1) after it needs that record removed in between. Which life it saw is not
/// recorded, so any release or absent completion that may fall in between will do, and
/// with a ttl an expiry always might: then this check says nothing.
fn i4_no_fresh_claim_after_a_live_record(h: &KeyHistory) -> Vec<Violation> {
    if h.ttl_micros.is_some() {
        return Vec::new();
    }
    let mut found = Vec::new();
    for fresh in h.claims().iter().filter(|c| c.attempt == 1) {
        let saw = h
            .events
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::InProgress | Outcome::Replay { .. }))
            .filter(|e| precedes(e, fresh.event))
            .max_by_key(|e| e.invoked);
        let Some(saw) = saw else { continue };
        let removed = h
            .life_enders()
            .any(|(e, _)| may_precede(e, fresh.event) && latest(e) > saw.invoked);
        if !removed {
            found.push(h.violation(
                Invariant::I4,
                format!(
                    "a fresh claim after a begin saw the key held or completed, with no \
                     release or absent completion in between: {} then {}",
                    describe(saw),
                    describe(fresh.event)
                ),
            ));
        }
    }
    found
}

/// A life's acknowledged completions: one fence's completion, repeated with that fence
/// (a retry gets the stored state back), except that a failure may be claimed again
/// (`return_cached_if_success`) and completed with the new, higher fence.
fn i4_one_completion_per_life(h: &KeyHistory) -> Vec<Violation> {
    let mut found = Vec::new();
    for life in h.lives() {
        let mut by_fence: BTreeMap<i64, Vec<&Event>> = BTreeMap::new();
        for e in &h.events {
            if let (Op::Complete { fence, .. }, Outcome::Completed { .. }) = (&e.op, &e.outcome) {
                if life.has_fence(*fence) {
                    by_fence.entry(*fence).or_default().push(e);
                }
            }
        }
        for done in by_fence.values() {
            let first = done[0];
            if let Some(other) = done[1..].iter().find(|e| e.outcome != first.outcome) {
                found.push(h.violation(
                    Invariant::I4,
                    format!(
                        "a completion retried with the same fence got another state: {} then {}",
                        describe(first),
                        describe(other)
                    ),
                ));
            }
        }
        let fences: Vec<&Vec<&Event>> = by_fence.values().collect();
        for pair in fences.windows(2) {
            let not_failed = pair[0].iter().find(|e| {
                e.outcome
                    != Outcome::Completed {
                        state: "failed".into(),
                    }
            });
            if let Some(earlier) = not_failed {
                found.push(h.violation(
                    Invariant::I4,
                    format!(
                        "one life completed twice, with two fences: {} and {}",
                        describe(earlier),
                        describe(pair[1][0])
                    ),
                ));
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------
// I6: a superseded fence is refused.

/// Once a claim with a higher fence has returned, completing, releasing or extending
/// with the lower fence must fail with IK003; an acknowledgement is a stale holder
/// acting on a call it no longer holds.
fn i6_stale_fences_refused(h: &KeyHistory) -> Vec<Violation> {
    let claims = h.claims();
    let mut found = Vec::new();
    for e in &h.events {
        let fence = match (&e.op, &e.outcome) {
            (Op::Complete { fence, .. }, Outcome::Completed { .. })
            | (Op::Release { fence }, Outcome::Done)
            | (Op::Extend { fence }, Outcome::Done) => *fence,
            _ => continue,
        };
        let newer = claims
            .iter()
            .filter(|c| c.fence > fence && precedes(c.event, e))
            .min_by_key(|c| latest(c.event));
        if let Some(newer) = newer {
            found.push(h.violation(
                Invariant::I6,
                format!(
                    "fence {fence} was acknowledged after a claim with a higher fence had \
                     returned (it should have been refused with IK003): {} then {}",
                    describe(newer.event),
                    describe(e)
                ),
            ));
        }
    }
    found
}
