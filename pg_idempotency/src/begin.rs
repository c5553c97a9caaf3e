//! `idem_begin`: claim a call, or learn that it is running, or get its remembered result.
//!
//! A lock-free read serves the common repeat (a replay) without writing anything. Who claims
//! is decided by one atomic statement: `INSERT ... ON CONFLICT DO NOTHING` for an absent key,
//! or an `UPDATE` guarded by the fence that was read for a row that can be claimed again.
//! When that statement loses a race, the loop reads again and answers from what won.
//!
//! Every decision is pg_idempotency_protocol::decide's (`decide::begin`, `decide::take_over`), the same
//! functions the client's MemoryStore (client/src/memory.rs) takes them through; this file
//! reads, asks, and writes what the answer says. The PL/pgSQL variant
//! (sql/pg_idempotency.sql, held equal by the behaviour suite tests/ run on both backends)
//! and RedisStore's scripts (client/src/redis_lua/, by the parity suite
//! client/tests/parity.rs) state the same rules in their own languages.

use pg_idempotency_protocol::decide::{self, Step, MAX_RACES};
use pg_idempotency_protocol::refusal::{self, Api};
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

/// What the call asked for; NULL arguments are None until the scope's policy and the GUC
/// defaults fill them in.
pub(crate) struct Call {
    pub scope: String,
    pub key: String,
    /// The calling role: the key space the call lives in.
    pub owner: pg_sys::Oid,
    pub fingerprint: Option<[u8; 32]>,
    pub ttl: Option<i64>,
    pub lease: Option<i64>,
    pub on_cache_hit: Option<OnCacheHit>,
    pub on_mismatch: Option<OnMismatch>,
    pub wait: i64,
    /// The caller's token for this attempt: a repeat of it gets the claim it made back.
    pub claim_token: Option<pgrx::Uuid>,
    /// How long past its ttl the record stays if its outcome becomes unknown (None:
    /// `pg_idempotency.unresolved_ttl`).
    pub unresolved_ttl: Option<i64>,
}

/// The settings in force for a call: its arguments, else its scope's policy, else the
/// defaults.
struct BeginSettings {
    ttl: i64,
    lease: i64,
    on_cache_hit: OnCacheHit,
    on_mismatch: OnMismatch,
    unresolved_ttl: i64,
}

impl BeginSettings {
    fn resolve(call: &Call, policy: &ScopePolicy) -> IdemResult<BeginSettings> {
        let ttl = args::effective_ttl(call.ttl, policy.ttl)?;
        Ok(BeginSettings {
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
            unresolved_ttl: args::effective_unresolved_ttl(
                call.unresolved_ttl,
                policy.unresolved_ttl,
            ),
        })
    }
}

/// What `idem_begin` answers: the values of its result row.
pub(crate) enum Outcome {
    Claimed {
        fence: i64,
        attempt: i32,
        recovered: bool,
        upstream_key: pgrx::Uuid,
        lease_until: Micros,
        expires_at: Micros,
    },
    Replay {
        attempt: i32,
        upstream_key: pgrx::Uuid,
        succeeded: bool,
        response: Option<pg_sys::Datum>,
        lease_until: Option<Micros>,
        expires_at: Micros,
    },
    InProgress {
        attempt: i32,
        upstream_key: pgrx::Uuid,
        lease_until: Micros,
        expires_at: Micros,
        retry_after_us: u64,
    },
}

pub fn idem_begin(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = BeginArgs::read(a);
    let scope = args::scope(given.scope)?;
    let fingerprint = given.request.map(request::fingerprint).transpose()?;
    let key = key_of(given.key, &fingerprint)?;
    let call = Call {
        scope,
        key,
        owner: roles::caller()?,
        fingerprint,
        ttl: args::ttl(given.ttl)?,
        lease: args::lease(given.lease)?,
        on_cache_hit: args::on_cache_hit(given.on_cache_hit.as_deref())?,
        on_mismatch: args::on_mismatch(given.on_mismatch.as_deref())?,
        wait: args::wait(given.wait)?,
        claim_token: given.claim_token,
        unresolved_ttl: args::unresolved_ttl(given.unresolved_ttl)?,
    };
    call.check_lease()?;
    let outcome = answer(&call)?;
    metrics::flush(matches!(outcome, Outcome::Claimed { .. }));
    let mut full: [Column; 11] = [None; 11];
    full[..10].copy_from_slice(&columns(outcome));
    full[10] = call.key.as_str().into_datum();
    Ok(composite(a, &full))
}

/// The call's key: the one given, or (NULL) the hex SHA-256 of its request's canonical JSON.
pub(crate) fn key_of(given: Option<String>, fingerprint: &Option<[u8; 32]>) -> IdemResult<String> {
    match (given, fingerprint) {
        (None, Some(fp)) => Ok(request::hash_key(fp)),
        (None, None) => Err(IdemError::invalid(
            "key must not be null without a request",
            "A NULL key asks for the key to be derived from the request, and no request was given.",
            "Pass a key, or a request to derive it from (HASH_INPUT).",
        )),
        (key, _) => args::key(key),
    }
}

/// Decides the call and counts its outcome (a refusal too) in the scope's metrics; the
/// caller writes the counts ([`metrics::flush`]) once it has answered.
pub(crate) fn answer(call: &Call) -> IdemResult<Outcome> {
    let outcome = decide(call);
    let counter = match &outcome {
        Ok(Outcome::Claimed { .. }) => Some(Counter::Claimed),
        Ok(Outcome::Replay { .. }) => Some(Counter::Replay),
        Ok(Outcome::InProgress { .. }) => Some(Counter::InProgress),
        Err(e) if e.kind == ErrorKind::Mismatch => Some(Counter::Mismatch),
        Err(e) if e.kind == ErrorKind::RepeatRefused => Some(Counter::Refused),
        Err(_) => None,
    };
    if let Some(c) = counter {
        metrics::count(call.owner, &call.scope, c);
    }
    outcome
}

impl Call {
    /// A lease longer than the ttl, both given, is refused before anything is read.
    pub(crate) fn check_lease(&self) -> IdemResult<()> {
        if let (Some(lease), Some(ttl)) = (self.lease, self.ttl) {
            args::effective_lease(Some(lease), None, ttl)?;
        }
        Ok(())
    }

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
    // stretch it (the leases it waits on are the wall clock's, as everywhere). A call that
    // does not wait (the default) has no wait left whenever it is asked, and reads no clock
    // for it.
    let waiting_since = (call.wait > 0).then(std::time::Instant::now);
    let wait_left = || match waiting_since {
        Some(since) => (call.wait - since.elapsed().as_micros() as i64).max(0) as u64,
        None => 0,
    };
    let mut pause = 2_000;
    let mut settings: Option<BeginSettings> = None;
    for race in 0..MAX_RACES {
        // The first round uses the start time: one clock read for a replay.
        let now = if race == 0 { started } else { clock::now() };
        let (record, policy) = store::read(&id);
        let set = match &settings {
            Some(set) => set,
            None => settings.insert(BeginSettings::resolve(call, &policy)?),
        };
        let asked = decide::Call {
            fingerprint: call.fingerprint.as_ref().map(|f| &f[..]),
            on_cache_hit: set.on_cache_hit,
            on_mismatch: set.on_mismatch,
            claim_token: call.claim_token.map(|t| *t.as_bytes()),
        };
        let read = record.as_ref().map(Record::read);
        // The wait's clock and the scope's estimate are read only when a live lease asks.
        let step = decide::begin(read.as_ref(), &asked, now, wait_left, || {
            estimates::of(call.owner, &call.scope)
        });
        match (step, record.as_ref()) {
            (Step::Claim, seen) | (_, seen @ None) => {
                let claim = fresh_claim(call, set, now);
                durability::ensure_durable_commit();
                let won = match seen {
                    None => store::insert(&id, &claim),
                    // An expired record is claimed in its place.
                    Some(r) => store::claim_again(&id, r, &claim),
                };
                if won {
                    return Ok(claimed(claim));
                }
            }
            (Step::TakeOver { recovered }, Some(r)) => {
                if let Some(o) = take_over(call, &asked, set, r, now, recovered) {
                    return Ok(o);
                }
            }
            (Step::OwnClaim, Some(r)) => {
                // A repeat of the attempt that claimed (its answer was lost): the same claim.
                return Ok(Outcome::Claimed {
                    fence: r.fence,
                    attempt: r.attempt,
                    recovered: r.recovered,
                    upstream_key: r.upstream_key,
                    lease_until: r.lease_until.unwrap_or(now),
                    expires_at: r.expires_at,
                });
            }
            (Step::Replay, Some(r)) => {
                return Ok(Outcome::Replay {
                    attempt: r.attempt,
                    upstream_key: r.upstream_key,
                    succeeded: r.state == State::Succeeded,
                    response: r.response,
                    lease_until: r.lease_until,
                    expires_at: r.expires_at,
                });
            }
            (Step::InProgress { retry_after_us }, Some(r)) => {
                return Ok(Outcome::InProgress {
                    attempt: r.attempt,
                    upstream_key: r.upstream_key,
                    lease_until: r.lease_until.unwrap_or(now),
                    expires_at: r.expires_at,
                    retry_after_us,
                });
            }
            (Step::Wait { wait_left_us, .. }, Some(_)) => {
                clock::nap(pause.min(wait_left_us as i64));
                pause = (pause * 2).min(100_000);
            }
            (Step::Mismatch { stored, given }, Some(_)) => {
                return Err(refusal::mismatch(stored, given).into());
            }
            (Step::RepeatRefused, Some(r)) => {
                return Err(refusal::repeat_refused(r.state, r.attempt, Api::Sql).into());
            }
        }
    }
    Err(refusal::contention().into())
}

fn fresh_claim<'a>(call: &'a Call, set: &BeginSettings, now: Micros) -> Claim<'a> {
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
        unresolved_until: now + set.lease + set.unresolved_ttl,
        lease: set.lease,
    }
}

/// Claims a live record again: after a lapsed lease (`recovered`) or to rerun a failure.
/// The upstream key and creation time stay: it is the same call.
fn take_over(
    call: &Call,
    asked: &decide::Call<'_>,
    set: &BeginSettings,
    record: &Record,
    now: Micros,
    recovered: bool,
) -> Option<Outcome> {
    let again = decide::take_over(&record.read(), asked, ids::next_fence(), now + set.ttl);
    let claim = Claim {
        fence: again.fence,
        attempt: again.attempt,
        fingerprint: again.fingerprint,
        upstream_key: record.upstream_key,
        created_at: record.created_at,
        lease_until: now + set.lease,
        expires_at: again.expires_at,
        ttl: set.ttl,
        claim_token: call.claim_token,
        recovered,
        claimed_at: now,
        unresolved_until: now + set.lease + set.unresolved_ttl,
        lease: set.lease,
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

fn ts(m: Micros) -> Column {
    Some(pg_sys::Datum::from(m))
}

/// The result row's columns but the key: outcome, fence, attempt, recovered, upstream_key,
/// succeeded, response, lease_until, expires_at, retry_after.
pub(crate) fn columns(outcome: Outcome) -> [Column; 10] {
    let text = |s: &str| s.into_datum();
    match outcome {
        Outcome::Claimed {
            fence,
            attempt,
            recovered,
            upstream_key,
            lease_until,
            expires_at,
        } => [
            text(pg_idempotency_protocol::Outcome::Claimed.as_sql()),
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
        Outcome::Replay {
            attempt,
            upstream_key,
            succeeded,
            response,
            lease_until,
            expires_at,
        } => [
            text(pg_idempotency_protocol::Outcome::Replay.as_sql()),
            None,
            attempt.into_datum(),
            false.into_datum(),
            upstream_key.into_datum(),
            succeeded.into_datum(),
            response,
            lease_until.and_then(ts),
            ts(expires_at),
            None,
        ],
        Outcome::InProgress {
            attempt,
            upstream_key,
            lease_until,
            expires_at,
            retry_after_us,
        } => [
            text(pg_idempotency_protocol::Outcome::InProgress.as_sql()),
            None,
            attempt.into_datum(),
            false.into_datum(),
            upstream_key.into_datum(),
            None,
            None,
            ts(lease_until),
            ts(expires_at),
            micros_interval(retry_after_us as i64).into_datum(),
        ],
    }
}
