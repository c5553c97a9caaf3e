//! What a store is asked and what it answers: the semantics of the SQL API, in Rust types.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use uuid::Uuid;

/// The policy words, as the SQL API takes them (`as_sql`).
pub use protocol::{OnCacheHit, OnMismatch};

/// The optional arguments of `begin`; `None` leaves a setting to the scope's policy (where
/// the store has policies) and then to the defaults.
#[derive(Debug, Clone, Default)]
pub struct BeginOptions {
    /// The call's input: its canonical SHA-256 is the fingerprint checked for mismatches.
    pub request: Option<Value>,
    pub ttl: Option<Duration>,
    pub lease: Option<Duration>,
    pub on_cache_hit: Option<OnCacheHit>,
    pub on_mismatch: Option<OnMismatch>,
    /// How long to wait for a live holder's result instead of answering `InProgress`.
    pub wait: Duration,
    /// This attempt's token: a repeat of the same `begin` with the same token, made because
    /// its answer never arrived, gets the claim it made back (the same fence) instead of
    /// `InProgress` until the lease lapses. A new random token for each new attempt.
    pub claim_token: Option<Uuid>,
}

/// This call holds the key: do the work, then complete (or release) with `fence`.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub fence: i64,
    pub attempt: i32,
    /// A lapsed lease was taken over: the earlier attempt's outcome is unknown.
    pub recovered: bool,
    /// Stable across takeovers: send it upstream as `Idempotency-Key`.
    pub upstream_key: Uuid,
    pub lease_until: SystemTime,
    pub expires_at: SystemTime,
}

/// The call already ran: its remembered result.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub succeeded: bool,
    pub response: Option<Value>,
    pub attempt: i32,
    pub upstream_key: Uuid,
    pub expires_at: SystemTime,
}

/// Another attempt holds the call.
#[derive(Debug, Clone, PartialEq)]
pub struct InProgress {
    pub attempt: i32,
    pub upstream_key: Uuid,
    /// Until the holder's lease lapses.
    pub retry_after: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    Claimed(Claim),
    Replay(Replay),
    InProgress(InProgress),
}

/// The state a completion left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    Succeeded,
    Failed,
    /// An uncached failure: nothing is remembered, a retry runs the call again.
    Absent,
}

/// A record's state, in the protocol's words.
pub use protocol::State;

/// The state a store names: one of the protocol's words, or the store answered nonsense.
pub(crate) fn state_named(word: &str) -> crate::error::Result<State> {
    State::parse(word).ok_or_else(|| {
        crate::error::Error::new(
            crate::error::ErrorKind::Serialization,
            format!(
                "a record's state is {word:?}, not one of {}",
                State::listed()
            ),
        )
    })
}

/// A record, as `lookup` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub state: State,
    pub fence: i64,
    pub attempt: i32,
    pub fingerprint: Option<[u8; 32]>,
    pub upstream_key: Uuid,
    pub response: Option<Value>,
    pub created_at: SystemTime,
    pub completed_at: Option<SystemTime>,
    pub lease_until: Option<SystemTime>,
    pub expires_at: SystemTime,
}
