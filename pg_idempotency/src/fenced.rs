//! What only the holder of a claim may do, named by its fence: complete, release, extend.
//!
//! Each reads the record, asks pg_idempotency_protocol::decide (`held`, `completion`, `extended_expiry`:
//! the same functions the client's MemoryStore takes), then writes with a statement
//! guarded by the fence; if the record changed in between, it reads again. A stale fence is
//! an error, never a silent no-op, except completing again with the fence that completed
//! the record (its first reply may have been lost), which keeps the stored result.

use pg_idempotency_protocol::decide::{self, Holding, Lost, Op, MAX_RACES};
use pg_idempotency_protocol::refusal::{self, Api};
use pgrx::{pg_sys, IntoDatum};

use crate::args;
use crate::call_args::{CompleteArgs, ExtendArgs, ReleaseArgs};
use crate::clock::{self, Micros};
use crate::durability;
use crate::entry::{composite, Args};
use crate::error::{IdemError, IdemResult};
use crate::estimates;
use crate::metrics;
use crate::policy_cache::ScopePolicy;
use crate::request;
use crate::roles;
use crate::store::{self, Completion, Id, Record};

pub(crate) struct Held {
    pub scope: String,
    pub key: String,
    /// The calling role: only its own records can be held by its fences.
    pub owner: pg_sys::Oid,
    pub fence: i64,
}

impl Held {
    fn id(&self) -> Id<'_> {
        Id {
            scope: &self.scope,
            key: &self.key,
            owner: self.owner,
        }
    }
}

/// The claim named by a holder's call: every one of them starts (scope, key, fence).
pub(crate) fn held(
    scope: Option<String>,
    key: Option<String>,
    fence: Option<i64>,
) -> IdemResult<Held> {
    Ok(Held {
        scope: args::scope(scope)?,
        key: args::key(key)?,
        owner: roles::caller()?,
        fence: args::fence(fence)?,
    })
}

fn lease_lost(why: Lost) -> IdemError {
    refusal::lease_lost(why, Api::Sql).into()
}

/// The live record that `h.fence` holds for `op` (and its scope's policy, and what it
/// holds), or why it does not.
fn read_held(h: &Held, now: Micros, op: Op) -> IdemResult<(Record, ScopePolicy, Holding)> {
    // Another role's record of the same scope and key is not this caller's: it reads as
    // absent, so what the caller is told does not depend on it.
    let (record, policy) = store::read(&h.id());
    let holding = decide::held(record.as_ref().map(Record::read).as_ref(), h.fence, now, op)
        .map_err(lease_lost)?;
    // `held` holds only a live record.
    let record = record.ok_or_else(|| lease_lost(Lost::Absent))?;
    Ok((record, policy, holding))
}

pub fn idem_complete(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = CompleteArgs::read(a);
    let h = held(given.scope, given.key, given.fence)?;
    let response = given.response;
    request::check_response_size(response)?;
    let succeeded = given.succeeded.ok_or_else(|| {
        IdemError::invalid(
            "succeeded must not be null",
            "A completion records whether the call succeeded.",
            "Pass succeeded => true or false.",
        )
    })?;
    let cache_failure = given.cache_failure;

    let (state, expires_at) = complete(&h, response, succeeded, cache_failure)?;
    metrics::flush(true);
    Ok(composite(
        a,
        &[state.into_datum(), expires_at.map(pg_sys::Datum::from)],
    ))
}

/// Records the result; returns the state left and its expiry. A completion that writes the
/// client's mark (unrecorded, outcome_unknown) counts it; one repeated under its fence, which
/// writes nothing, does not count it again.
pub(crate) fn complete(
    h: &Held,
    response: Option<pg_sys::Datum>,
    succeeded: bool,
    cache_failure: Option<bool>,
) -> IdemResult<(&'static str, Option<Micros>)> {
    for _ in 0..MAX_RACES {
        let now = clock::now();
        let (record, policy, holding) = read_held(h, now, Op::Complete)?;
        if let Holding::Completed(kept) = holding {
            // Completed by this very fence before: keep what is stored.
            return Ok((kept.as_sql(), Some(record.expires_at)));
        }
        durability::ensure_durable_commit();
        // The call's word, else its scope's policy; failures are not cached by default.
        let cache_failure = cache_failure.or(policy.cache_failures).unwrap_or(false);
        let completion = decide::completion(succeeded, cache_failure);
        let Some(state) = completion.state() else {
            // An uncached failure leaves nothing behind, so a retry runs the call again.
            if store::delete_held(&h.id(), h.fence) {
                took(h, &record, now);
                return Ok((completion.as_sql(), None));
            }
            continue;
        };
        let expires_at = now + record.ttl;
        let stored = Completion {
            state,
            response,
            completed_at: now,
            expires_at,
        };
        if let Some(written) = store::complete(&h.id(), h.fence, &stored, record.tid) {
            if let Some(mark) = written.mark {
                metrics::count(h.owner, &h.scope, mark);
            }
            took(h, &record, now);
            return Ok((completion.as_sql(), Some(expires_at)));
        }
    }
    Err(refusal::contention().into())
}

/// The completed attempt's time from claim to completion, into its scope's estimate (a
/// record claimed before 0.5.0 counts from its creation).
fn took(h: &Held, record: &Record, now: Micros) {
    let claimed_at = record.claimed_at.unwrap_or(record.created_at);
    estimates::sample(h.owner, &h.scope, now - claimed_at);
}

pub fn idem_release(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = ReleaseArgs::read(a);
    release(&held(given.scope, given.key, given.fence)?)?;
    Ok(pg_sys::Datum::from(0usize))
}

fn release(h: &Held) -> IdemResult<()> {
    for _ in 0..MAX_RACES {
        let now = clock::now();
        // A completed record is refused (Lost::ReleaseCompleted): only a running one is held.
        read_held(h, now, Op::Release)?;
        durability::ensure_durable_commit();
        if store::delete_held(&h.id(), h.fence) {
            return Ok(());
        }
    }
    Err(refusal::contention().into())
}

pub fn idem_extend(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = ExtendArgs::read(a);
    let h = held(given.scope, given.key, given.fence)?;
    let lease = args::lease(given.lease)?;
    let (lease_until, expires_at) = extend(&h, lease)?;
    Ok(composite(
        a,
        &[
            Some(pg_sys::Datum::from(lease_until)),
            Some(pg_sys::Datum::from(expires_at)),
        ],
    ))
}

/// Extends the lease; returns its new end and the record's expiry.
fn extend(h: &Held, lease: Option<i64>) -> IdemResult<(Micros, Micros)> {
    for _ in 0..MAX_RACES {
        let now = clock::now();
        // A completed record is refused (Lost::ExtendCompleted): only a running one is held.
        let (record, policy, _) = read_held(h, now, Op::Extend)?;
        let lease = args::effective_lease(lease, policy.lease, record.ttl)?;
        let lease_until = now + lease;
        let expires_at = decide::extended_expiry(record.expires_at, lease_until);
        durability::ensure_durable_commit();
        if store::extend(&h.id(), h.fence, lease_until, expires_at, lease) {
            return Ok((lease_until, expires_at));
        }
    }
    Err(refusal::contention().into())
}
