//! What `begin` does with the record it read.

use super::{Read, Time};
use crate::estimate;
use crate::{OnCacheHit, OnMismatch, State};

/// What the call asked for, its policies resolved (argument, else the scope's policy,
/// else the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call<'a> {
    /// The request's fingerprint, if the call gave a request.
    pub fingerprint: Option<&'a [u8]>,
    pub on_cache_hit: OnCacheHit,
    pub on_mismatch: OnMismatch,
    /// The caller's token for this attempt: a repeat of it gets the claim it made back.
    pub claim_token: Option<[u8; 16]>,
}

/// What `begin` does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// No live record: claim the call afresh (attempt 1, a new upstream key).
    Claim,
    /// Claim the live record again ([`take_over`] gives the values): its holder's lease
    /// lapsed (`recovered`: the holder's outcome is unknown), or a remembered failure is
    /// run again under `return_cached_if_success`.
    TakeOver { recovered: bool },
    /// A repeat of the attempt that holds the claim (same claim token, lease live): its
    /// answer was lost, it gets the same claim back.
    OwnClaim,
    /// The call completed: its remembered result.
    Replay,
    /// Another attempt holds the call and the wait is over, or its holder has stopped
    /// beating (pg_idempotency_protocol::estimate: then the wait ends at once): tell the caller so, with
    /// the running attempt's estimated time left, or the lease's time left for a holder
    /// that stopped (pg_idempotency_protocol::estimate), in microseconds.
    InProgress { retry_after_us: u64 },
    /// Another attempt holds the call and the caller still waits: read again after a
    /// pause of at most `wait_left_us`; the lease lapses in `lease_left_us` (then the call
    /// can be taken over); its holder counts as stopped in `stops_in_us` unless it beats
    /// again (read again by then: the wait then ends).
    Wait {
        wait_left_us: u64,
        lease_left_us: u64,
        stops_in_us: u64,
    },
    /// The key was used with another request (refusal::mismatch).
    Mismatch { stored: &'a [u8], given: &'a [u8] },
    /// A repeat of a completed call under `fail_fast` (refusal::repeat_refused).
    RepeatRefused,
}

/// The step for `call` given `record` (None: no record) at `now`.
///
/// Two inputs are asked for only when a live lease makes them matter, so the common
/// answers (a claim, a replay) cost no clock read and no lookup: `wait_left_us`, how much
/// of the call's wait is left (zero: it is over), and `estimate_us`, the scope's estimate
/// of a call's time from claim to completion, if it has one.
pub fn begin<'a, T: Time>(
    record: Option<&Read<'a, T>>,
    call: &Call<'a>,
    now: T,
    wait_left_us: impl FnOnce() -> u64,
    estimate_us: impl FnOnce() -> Option<u64>,
) -> Step<'a> {
    let Some(r) = record.filter(|r| r.is_live(now)) else {
        return Step::Claim;
    };
    if let (Some(given), Some(stored)) = (call.fingerprint, r.fingerprint) {
        if call.on_mismatch != OnMismatch::Ignore && given != stored {
            return Step::Mismatch { stored, given };
        }
    }
    let lease_live = r.lease_live(now);
    match (r.state, call.on_cache_hit) {
        (State::InProgress, _)
            if lease_live && call.claim_token.is_some() && call.claim_token == r.claim_token =>
        {
            Step::OwnClaim
        }
        (State::InProgress, _) if lease_live => {
            let lease_left_us = r.lease_until.map_or(0, |l| l.micros_since(now));
            // A holder that stopped beating ends the wait at once: waiting longer only
            // holds the caller's connection until the lease lapses.
            if estimate::stopped(r.lease_us, lease_left_us) {
                return Step::InProgress {
                    retry_after_us: lease_left_us,
                };
            }
            match wait_left_us() {
                0 => Step::InProgress {
                    retry_after_us: estimate::retry_after_us(
                        estimate_us(),
                        now.micros_since(r.claimed_at),
                        lease_left_us,
                        r.lease_us,
                    ),
                },
                wait_left_us => Step::Wait {
                    wait_left_us,
                    lease_left_us,
                    stops_in_us: estimate::stops_in(r.lease_us, lease_left_us),
                },
            }
        }
        (State::InProgress, _) => Step::TakeOver { recovered: true },
        (State::Succeeded | State::Failed, OnCacheHit::FailFast) => Step::RepeatRefused,
        (State::Failed, OnCacheHit::ReturnCachedIfSuccess) => Step::TakeOver { recovered: false },
        (State::Succeeded | State::Failed, _) => Step::Replay,
    }
}

/// What a claim taken over (or a failure claimed again) writes besides its lease; the
/// upstream key and the creation time stay the record's: it is the same call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Again<'a, T> {
    pub fence: i64,
    pub attempt: i32,
    pub fingerprint: Option<&'a [u8]>,
    pub expires_at: T,
}

/// The values of `record` claimed again by `call`: `sequence` is the store's next fence,
/// `expires_at` the call's own expiry (now + its ttl).
pub fn take_over<'a, T: Time>(
    record: &Read<'a, T>,
    call: &Call<'a>,
    sequence: i64,
    expires_at: T,
) -> Again<'a, T> {
    Again {
        // A sequence shared by many sessions does not alone order fences per key; this does.
        fence: sequence.max(record.fence.saturating_add(1)),
        attempt: record.attempt.saturating_add(1),
        // The first request's fingerprint stays the call's identity (on_mismatch =>
        // 'ignore' must not replace it).
        fingerprint: record.fingerprint.or(call.fingerprint),
        // The call's expiry never moves earlier.
        expires_at: expires_at.max(record.expires_at),
    }
}

#[cfg(test)]
mod tests;
