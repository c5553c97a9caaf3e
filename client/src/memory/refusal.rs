//! The state machine's refusals (mismatch, repeat refused, lease lost) in the SQL API's
//! words, for the stores that decide them themselves: `MemoryStore` and `RedisStore`.
//! Messages and details are the server's (pg_idempotency/src/begin.rs and holder.rs), so a
//! caller reads the same error whatever the store; a hint names the client's calls where
//! the server's names its SQL functions. client/tests/parity/errors.rs holds them equal.

use crate::error::{Error, ErrorKind};

/// Why a fence does not hold the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// No live record: released, never claimed, or expired.
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

impl Lost {
    /// Why `fence` does not hold a live record held under `holder`.
    pub(crate) fn fence(holder: i64, fence: i64) -> Lost {
        if holder > fence {
            Lost::LaterFence
        } else {
            Lost::OtherFence
        }
    }
}

pub(crate) fn lease_lost(why: Lost) -> Error {
    Error::new(
        ErrorKind::LeaseLost,
        "lease lost: this fence does not hold the record",
    )
    .with_detail(match why {
        Lost::Absent => {
            "The key has no live record: it was released, forgotten, never claimed, or it expired."
        }
        Lost::LaterFence => {
            "The record is held under a later fence: the call was taken over or claimed again."
        }
        Lost::OtherFence => "The record is held under a different fence.",
        // The server's detail names its SQL function, idem_forget.
        Lost::ReleaseCompleted => "The call was already completed; forget removes a stored result.",
        Lost::ExtendCompleted => "The call was already completed; there is no lease to extend.",
    })
    .with_hint(
        "Another attempt took the call over, or it was completed, released or expired; do not \
         apply this attempt's result. Call begin again to learn the call's state.",
    )
}

fn hex(fp: &[u8; 32]) -> String {
    canon::key_of(fp)
}

pub(crate) fn mismatch(stored: &[u8; 32], given: &[u8; 32]) -> Error {
    Error::new(
        ErrorKind::Mismatch,
        "idempotency key reused with a different request",
    )
    .with_detail(format!(
        "The key was first used with a request of fingerprint \\x{}; this request's fingerprint is \\x{}.",
        hex(stored),
        hex(given)
    ))
    .with_hint(
        "Use a new key for a different request, or on_mismatch => 'ignore' when only part of the request names the call.",
    )
}

pub(crate) fn repeat_refused(succeeded: bool, attempt: i32) -> Error {
    Error::new(
        ErrorKind::RepeatRefused,
        "repeat of a completed call refused",
    )
    .with_detail(format!(
        "The call {} at attempt {attempt}; on_cache_hit is 'fail_fast'.",
        if succeeded { "succeeded" } else { "failed" }
    ))
    .with_hint("Look at the stored result with lookup, or use a new key to run the call again.")
}
