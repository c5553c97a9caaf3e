//! `idem_begin`: claim a call, or learn that it is running, or get its remembered result.
//!
//! A lock-free read serves the common repeat (a replay) without writing anything. Who claims
//! is decided by one atomic statement: `INSERT ... ON CONFLICT DO NOTHING` for an absent key,
//! or an `UPDATE` guarded by the fence that was read for a row that can be claimed again.
//! When that statement loses a race, the loop reads again and answers from what won.
//!
//! The same state machine exists three more times, held equal by tests: the PL/pgSQL
//! variant (sql/pg_idempotency.sql, by the behaviour suite tests/ run on both backends),
//! and the client's MemoryStore (client/src/memory.rs) and RedisStore (client/src/redis.rs
//! with client/src/redis_lua/), by the parity suite client/tests/parity.rs.

use pgrx::{pg_sys, IntoDatum};

use crate::args::{self, micros_interval, OnCacheHit, OnMismatch};
use crate::call_args::BeginArgs;
use crate::clock::{self, Micros};
use crate::durability;
use crate::entry::{composite, Args, Column};
use crate::error::{ErrorKind, IdemError, IdemResult};
use crate::estimates;
use crate::ids;
use crate::metrics::{self, Counter};
use crate::policy_cache::ScopePolicy;
use crate::request;
use crate::roles;
use crate::store::{self, Claim, Id, Record, State};

/// How many lost races a call tolerates before it gives up; each one means another session
/// changed the record in the meantime.
const MAX_RACES: u32 = 1000;

/// What the call asked for; NULL arguments are None until the scope's policy and the GUC
/// defaults fill them in.
struct Call {
    scope: String,
    key: String,
    /// The calling role: the key space the call lives in.
    owner: pg_sys::Oid,
    fingerprint: Option<[u8; 32]>,
    ttl: Option<i64>,
    lease: Option<i64>,
    on_cache_hit: Option<OnCacheHit>,
    on_mismatch: Option<OnMismatch>,
    wait: i64,
    /// The caller's token for this attempt: a repeat of it gets the claim it made back.
    claim_token: Option<pgrx::Uuid>,
}

/// The settings in force for a call: its arguments, else its scope's policy, else the
/// defaults.
struct Settings {
    ttl: i64,
    lease: i64,
    on_cache_hit: OnCacheHit,
    on_mismatch: OnMismatch,
}

impl Settings {
    fn resolve(call: &Call, policy: &ScopePolicy) -> IdemResult<Settings> {
        let ttl = args::effective_ttl(call.ttl, policy.ttl)?;
        Ok(Settings {
            ttl,
            lease: args::effective_lease(call.lease, policy.lease, ttl)?,
            on_cache_hit: match call.on_cache_hit {
                Some(w) => w,
                None => args::on_cache_hit(policy.on_cache_hit.as_deref())?
                    .unwrap_or(OnCacheHit::ReturnCached),
            },
            on_mismatch: match call.on_mismatch {
                Some(w) => w,
                None => {
                    args::on_mismatch(policy.on_mismatch.as_deref())?.unwrap_or(OnMismatch::Reject)
                }
            },
        })
    }
}

enum Outcome {
    Claimed {
        fence: i64,
        attempt: i32,
        recovered: bool,
        upstream_key: pgrx::Uuid,
        lease_until: Micros,
        expires_at: Micros,
    },
    Replay(Record),
    InProgress {
        record: Record,
        now: Micros,
        /// The scope's estimate of a call's time from claim to completion, if it has one.
        estimate_us: Option<u64>,
    },
}

pub fn idem_begin(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = BeginArgs::read(a);
    let scope = args::scope(given.scope)?;
    let fingerprint = given.request.map(request::fingerprint).transpose()?;
    let key = match (given.key, &fingerprint) {
        (None, Some(fp)) => request::hash_key(fp),
        (None, None) => return Err(IdemError::invalid(
            "key must not be null without a request",
            "A NULL key asks for the key to be derived from the request, and no request was given.",
            "Pass a key, or a request to derive it from (HASH_INPUT).",
        )),
        (key, _) => args::key(key)?,
    };
    let call = Call {
        scope,
        key,
        owner: roles::caller(),
        fingerprint,
        ttl: args::ttl(given.ttl)?,
        lease: args::lease(given.lease)?,
        on_cache_hit: args::on_cache_hit(given.on_cache_hit.as_deref())?,
        on_mismatch: args::on_mismatch(given.on_mismatch.as_deref())?,
        wait: args::wait(given.wait)?,
        claim_token: given.claim_token,
    };
    if let (Some(lease), Some(ttl)) = (call.lease, call.ttl) {
        args::effective_lease(Some(lease), None, ttl)?;
    }
    let outcome = decide(&call);
    let counter = match &outcome {
        Ok(Outcome::Claimed { .. }) => Some(Counter::Claimed),
        Ok(Outcome::Replay(_)) => Some(Counter::Replay),
        Ok(Outcome::InProgress { .. }) => Some(Counter::InProgress),
        Err(e) if e.kind == ErrorKind::Mismatch => Some(Counter::Mismatch),
        Err(_) => None,
    };
    if let Some(c) = counter {
        metrics::count(call.owner, &call.scope, c);
    }
    Ok(result(a, outcome?, &call.key))
}

impl Call {
    fn id(&self) -> Id<'_> {
        Id {
            scope: &self.scope,
            key: &self.key,
            owner: self.owner,
        }
    }
}

fn decide(call: &Call) -> IdemResult<Outcome> {
    let id = call.id();
    let started = clock::now();
    // The wait is timed by the monotonic clock: a wall clock set back during it must not
    // stretch it (the leases it waits on are the wall clock's, as everywhere).
    let waiting_since = std::time::Instant::now();
    let mut pause = 2_000;
    let mut settings: Option<Settings> = None;
    for race in 0..MAX_RACES {
        // The first round uses the start time: one clock read for a replay.
        let now = if race == 0 { started } else { clock::now() };
        let (record, policy) = store::read(&id);
        let set = match &settings {
            Some(set) => set,
            None => settings.insert(Settings::resolve(call, &policy)?),
        };
        let record = match record {
            None => {
                let claim = fresh_claim(call, set, now);
                durability::ensure_durable_commit();
                if store::insert(&id, &claim) {
                    return Ok(claimed(claim));
                }
                continue;
            }
            Some(r) if !r.is_live(now) => {
                let claim = fresh_claim(call, set, now);
                durability::ensure_durable_commit();
                if store::claim_again(&id, &r, &claim) {
                    return Ok(claimed(claim));
                }
                continue;
            }
            Some(r) => r,
        };
        check_fingerprint(call, set, &record)?;
        let lease_live = record.lease_until.is_some_and(|l| l > now);
        match (record.state, set.on_cache_hit) {
            (State::InProgress, _) if lease_live && holds_own_claim(call, &record) => {
                // A repeat of the attempt that claimed (its answer was lost): the same claim.
                return Ok(Outcome::Claimed {
                    fence: record.fence,
                    attempt: record.attempt,
                    recovered: record.recovered,
                    upstream_key: record.upstream_key,
                    lease_until: record.lease_until.unwrap_or(now),
                    expires_at: record.expires_at,
                });
            }
            (State::InProgress, _) if lease_live => {
                let remaining = call.wait - waiting_since.elapsed().as_micros() as i64;
                if remaining <= 0 {
                    return Ok(Outcome::InProgress {
                        record,
                        now,
                        estimate_us: estimates::of(call.owner, &call.scope),
                    });
                }
                clock::nap(pause.min(remaining));
                pause = (pause * 2).min(100_000);
            }
            (State::InProgress, _) => {
                // The holder's lease lapsed: its outcome is unknown, the call is taken over.
                if let Some(o) = take_over(call, set, &record, now, true) {
                    return Ok(o);
                }
            }
            (State::Succeeded | State::Failed, OnCacheHit::FailFast) => {
                return Err(IdemError::new(
                    ErrorKind::RepeatRefused,
                    "repeat of a completed call refused",
                    format!("The call {} at attempt {}; on_cache_hit is 'fail_fast'.",
                        record.state.as_sql(),
                        record.attempt),
                    "Look at the stored result with idem_lookup, or use a new key to run the call again.",
                ));
            }
            (State::Failed, OnCacheHit::ReturnCachedIfSuccess) => {
                if let Some(o) = take_over(call, set, &record, now, false) {
                    return Ok(o);
                }
            }
            (State::Succeeded | State::Failed, _) => return Ok(Outcome::Replay(record)),
        }
    }
    Err(IdemError::new(
        ErrorKind::Contention,
        "could not settle the record: it kept changing",
        format!("{MAX_RACES} concurrent changes to this key overtook this call."),
        "Retry the call.",
    ))
}

/// The caller named the token of the claim holding the record.
fn holds_own_claim(call: &Call, record: &Record) -> bool {
    call.claim_token.is_some() && call.claim_token == record.claim_token
}

fn fresh_claim<'a>(call: &'a Call, set: &Settings, now: Micros) -> Claim<'a> {
    Claim {
        fence: ids::next_fence(),
        attempt: 1,
        fingerprint: call.fingerprint.as_ref().map(|f| &f[..]),
        upstream_key: ids::new_upstream_key(),
        created_at: now,
        lease_until: now + set.lease,
        expires_at: now + set.ttl,
        ttl: set.ttl,
        claim_token: call.claim_token,
        recovered: false,
        claimed_at: now,
    }
}

/// Claims a live record again: after a lapsed lease (`recovered`) or to rerun a failure.
/// The upstream key and creation time stay: it is the same call.
fn take_over(
    call: &Call,
    set: &Settings,
    record: &Record,
    now: Micros,
    recovered: bool,
) -> Option<Outcome> {
    // A sequence shared by many sessions does not alone order fences per key; this does.
    let fence = ids::next_fence().max(record.fence + 1);
    let claim = Claim {
        fence,
        attempt: record.attempt.saturating_add(1),
        // The first request's fingerprint stays the call's identity (on_mismatch => 'ignore'
        // must not replace it).
        fingerprint: record
            .fingerprint
            .as_deref()
            .or(call.fingerprint.as_ref().map(|f| &f[..])),
        upstream_key: record.upstream_key,
        created_at: record.created_at,
        lease_until: now + set.lease,
        expires_at: (now + set.ttl).max(record.expires_at),
        ttl: set.ttl,
        claim_token: call.claim_token,
        recovered,
        claimed_at: now,
    };
    durability::ensure_durable_commit();
    store::claim_again(&call.id(), record, &claim).then(|| claimed(claim))
}

fn claimed(c: Claim<'_>) -> Outcome {
    Outcome::Claimed {
        fence: c.fence,
        attempt: c.attempt,
        recovered: c.recovered,
        upstream_key: c.upstream_key,
        lease_until: c.lease_until,
        expires_at: c.expires_at,
    }
}

fn check_fingerprint(call: &Call, set: &Settings, record: &Record) -> IdemResult<()> {
    let (Some(given), Some(stored)) = (&call.fingerprint, &record.fingerprint) else {
        return Ok(());
    };
    if set.on_mismatch == OnMismatch::Ignore || given[..] == stored[..] {
        return Ok(());
    }
    Err(IdemError::new(
        ErrorKind::Mismatch,
        "idempotency key reused with a different request",
        format!(
            "The key was first used with a request of fingerprint \\x{}; this request's fingerprint is \\x{}.",
            hex::encode(stored),
            hex::encode(given)
        ),
        "Use a new key for a different request, or on_mismatch => 'ignore' when only part of the request names the call.",
    ))
}

/// The running attempt's estimated time left (protocol::estimate), in microseconds. A
/// record claimed before 0.5.0 counts from its creation.
fn retry_after(r: &Record, now: Micros, estimate_us: Option<u64>) -> i64 {
    let lease_left = (r.lease_until.unwrap_or(now) - now).max(0) as u64;
    let elapsed = (now - r.claimed_at.unwrap_or(r.created_at)).max(0) as u64;
    protocol::estimate::retry_after_us(estimate_us, elapsed, lease_left) as i64
}

fn ts(m: Micros) -> Column {
    Some(pg_sys::Datum::from(m))
}

fn result(a: &Args, outcome: Outcome, key: &str) -> pg_sys::Datum {
    let text = |s: &str| s.into_datum();
    // outcome, fence, attempt, recovered, upstream_key, succeeded, response,
    // lease_until, expires_at, retry_after; then key
    let row: [Column; 10] = match outcome {
        Outcome::Claimed {
            fence,
            attempt,
            recovered,
            upstream_key,
            lease_until,
            expires_at,
        } => [
            text(protocol::Outcome::Claimed.as_sql()),
            fence.into_datum(),
            attempt.into_datum(),
            recovered.into_datum(),
            upstream_key.into_datum(),
            None,
            None,
            ts(lease_until),
            ts(expires_at),
            None,
        ],
        Outcome::Replay(r) => [
            text(protocol::Outcome::Replay.as_sql()),
            None,
            r.attempt.into_datum(),
            false.into_datum(),
            r.upstream_key.into_datum(),
            (r.state == State::Succeeded).into_datum(),
            r.response,
            r.lease_until.and_then(ts),
            ts(r.expires_at),
            None,
        ],
        Outcome::InProgress {
            record: r,
            now,
            estimate_us,
        } => {
            let lease_until = r.lease_until.unwrap_or(now);
            [
                text(protocol::Outcome::InProgress.as_sql()),
                None,
                r.attempt.into_datum(),
                false.into_datum(),
                r.upstream_key.into_datum(),
                None,
                None,
                ts(lease_until),
                ts(r.expires_at),
                micros_interval(retry_after(&r, now, estimate_us)).into_datum(),
            ]
        }
    };
    let mut full: [Column; 11] = [None; 11];
    full[..10].copy_from_slice(&row);
    full[10] = text(key);
    composite(a, &full)
}
