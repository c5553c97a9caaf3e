//! What only the holder of a claim may do, named by its fence: complete, release, extend.
//!
//! Each reads the record, decides, then writes with a statement guarded by the fence; if the
//! record changed in between, it reads again. A stale fence is an error, never a silent no-op,
//! except completing again with the fence that completed the record (its first reply may
//! have been lost), which keeps the stored result.

use pgrx::{pg_sys, IntoDatum};

use crate::args;
use crate::call_args::{CompleteArgs, ExtendArgs, ReleaseArgs};
use crate::clock::{self, Micros};
use crate::durability;
use crate::entry::{composite, Args};
use crate::error::{ErrorKind, IdemError, IdemResult};
use crate::estimates;
use crate::policy_cache::ScopePolicy;
use crate::request;
use crate::roles;
use crate::store::{self, Completion, Id, Record, State};

const MAX_RACES: u32 = 1000;

struct Held {
    scope: String,
    key: String,
    /// The calling role: only its own records can be held by its fences.
    owner: pg_sys::Oid,
    fence: i64,
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
fn held(scope: Option<String>, key: Option<String>, fence: Option<i64>) -> IdemResult<Held> {
    Ok(Held {
        scope: args::scope(scope)?,
        key: args::key(key)?,
        owner: roles::caller(),
        fence: args::fence(fence)?,
    })
}

fn lease_lost(detail: impl Into<String>) -> IdemError {
    IdemError::new(
        ErrorKind::LeaseLost,
        "lease lost: this fence does not hold the record",
        detail,
        "Another attempt took the call over, or it was completed, released or expired; do not \
         apply this attempt's result. Call idem_begin again to learn the call's state.",
    )
}

fn contention() -> IdemError {
    IdemError::new(
        ErrorKind::Contention,
        "could not settle the record: it kept changing",
        format!("{MAX_RACES} concurrent changes to this key overtook this call."),
        "Retry the call.",
    )
}

/// The live record that `h.fence` holds (and its scope's policy), or why it does not.
fn read_held(h: &Held, now: Micros) -> IdemResult<(Record, ScopePolicy)> {
    // Another role's record of the same scope and key is not this caller's: it reads as
    // absent, so what the caller is told does not depend on it.
    let (record, policy) = store::read(&h.id());
    let Some(record) = record.filter(|r| r.is_live(now)) else {
        return Err(lease_lost(
            "The key has no live record: it was released, forgotten, never claimed, or it expired.",
        ));
    };
    if record.fence != h.fence {
        return Err(lease_lost(if record.fence > h.fence {
            "The record is held under a later fence: the call was taken over or claimed again."
        } else {
            "The record is held under a different fence."
        }));
    }
    Ok((record, policy))
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
    Ok(composite(
        a,
        &[state.into_datum(), expires_at.map(pg_sys::Datum::from)],
    ))
}

/// Records the result; returns the state left and its expiry.
fn complete(
    h: &Held,
    response: Option<pg_sys::Datum>,
    succeeded: bool,
    cache_failure: Option<bool>,
) -> IdemResult<(&'static str, Option<Micros>)> {
    for _ in 0..MAX_RACES {
        let now = clock::now();
        let (record, policy) = read_held(h, now)?;
        if record.state != State::InProgress {
            // Completed by this very fence before: keep what is stored.
            return Ok((record.state.as_sql(), Some(record.expires_at)));
        }
        durability::ensure_durable_commit();
        // The call's word, else its scope's policy; failures are not cached by default.
        let cache_failure = cache_failure.or(policy.cache_failures).unwrap_or(false);
        if !succeeded && !cache_failure {
            // An uncached failure leaves nothing behind, so a retry runs the call again.
            if store::delete_held(&h.id(), h.fence) {
                took(h, &record, now);
                return Ok((protocol::Completion::Absent.as_sql(), None));
            }
            continue;
        }
        let state = if succeeded {
            State::Succeeded
        } else {
            State::Failed
        };
        let expires_at = now + record.ttl;
        let completion = Completion {
            state,
            response,
            completed_at: now,
            expires_at,
        };
        if store::complete(&h.id(), h.fence, &completion, record.tid) {
            took(h, &record, now);
            return Ok((state.as_sql(), Some(expires_at)));
        }
    }
    Err(contention())
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
        let (record, _) = read_held(h, now)?;
        if record.state != State::InProgress {
            return Err(lease_lost(
                "The call was already completed; idem_forget removes a stored result.",
            ));
        }
        durability::ensure_durable_commit();
        if store::delete_held(&h.id(), h.fence) {
            return Ok(());
        }
    }
    Err(contention())
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
        let (record, policy) = read_held(h, now)?;
        if record.state != State::InProgress {
            return Err(lease_lost(
                "The call was already completed; there is no lease to extend.",
            ));
        }
        let lease = args::effective_lease(lease, policy.lease, record.ttl)?;
        let lease_until = now + lease;
        // A record never expires while its lease is live.
        let expires_at = record.expires_at.max(lease_until);
        durability::ensure_durable_commit();
        if store::extend(&h.id(), h.fence, lease_until, expires_at) {
            return Ok((lease_until, expires_at));
        }
    }
    Err(contention())
}
