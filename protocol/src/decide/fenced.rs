//! What only the holder of a claim may do, named by its fence: complete, release, extend.
//! A stale fence is refused (lease lost), never a silent no-op, except completing again
//! with the fence that completed the record (its first reply may have been lost), which
//! keeps the stored result.

use super::{Read, Time};
use crate::{Completion, State};

/// What the holder asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Complete,
    Release,
    Extend,
}

/// Why a fence does not hold the record (refusal::lease_lost words each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// No live record: released, forgotten, never claimed, or expired.
    Absent,
    /// The record is held under a later fence: taken over or claimed again.
    LaterFence,
    /// The record is held under another (earlier or unknown) fence.
    OtherFence,
    /// Released after it was completed.
    ReleaseCompleted,
    /// Extended after it was completed.
    ExtendCompleted,
}

/// What the holder finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// The fence holds the running call: do what was asked.
    Running,
    /// This fence completed the call before (`Op::Complete` only): answer what the
    /// stored completion left, change nothing.
    Completed(Completion),
}

/// Whether `fence` holds `record` (None: no record) at `now` for `op`, or why not.
pub fn held<T: Time>(
    record: Option<&Read<'_, T>>,
    fence: i64,
    now: T,
    op: Op,
) -> Result<Holding, Lost> {
    // Another role's record of the same scope and key is not the caller's: the store
    // gives None for it, so what the caller is told does not depend on it.
    let Some(r) = record.filter(|r| r.is_live(now)) else {
        return Err(Lost::Absent);
    };
    if r.fence != fence {
        return Err(if r.fence > fence {
            Lost::LaterFence
        } else {
            Lost::OtherFence
        });
    }
    match (r.state, op) {
        (State::InProgress, _) => Ok(Holding::Running),
        (State::Succeeded, Op::Complete) => Ok(Holding::Completed(Completion::Succeeded)),
        (State::Failed, Op::Complete) => Ok(Holding::Completed(Completion::Failed)),
        (_, Op::Release) => Err(Lost::ReleaseCompleted),
        (_, Op::Extend) => Err(Lost::ExtendCompleted),
    }
}

/// What a holder's completion leaves: its result, or nothing for a failure that is not
/// cached (`cache_failure`: the call's word, else its scope's policy, else false), so that
/// a retry runs the call again.
pub fn completion(succeeded: bool, cache_failure: bool) -> Completion {
    match (succeeded, cache_failure) {
        (true, _) => Completion::Succeeded,
        (false, true) => Completion::Failed,
        (false, false) => Completion::Absent,
    }
}

/// The record's expiry once its lease is extended to `lease_until`: a record never
/// expires while its lease is live.
pub fn extended_expiry<T: Time>(expires_at: T, lease_until: T) -> T {
    expires_at.max(lease_until)
}

#[cfg(test)]
mod tests;
