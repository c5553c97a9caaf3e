//! What a store is asked and what it answers: the semantics of the SQL API, in Rust types.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use uuid::Uuid;

/// The policy words, as the SQL API takes them (`as_sql`).
pub use pg_idempotency_protocol::{OnCacheHit, OnMismatch};

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
    /// How long past its ttl the record is kept if its outcome becomes unknown (its lease
    /// lapses, or it is completed with a mark, `marks.rs`): a later `begin` takes it over
    /// or replays the mark until then. `None`: the scope's policy (PgStore), else
    /// `pg_idempotency.unresolved_ttl` (7 days).
    pub unresolved_ttl: Option<Duration>,
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
    /// How long the running attempt is expected to take still, never past its lease: the
    /// scope's estimate of a call's claim-to-completion time minus the time the attempt
    /// has run, at least `pg_idempotency_protocol::estimate::FLOOR_MS`; `UNKNOWN_MS` while the scope has
    /// no completed call; in every case at most the time until the holder's lease lapses
    /// (protocol/src/estimate.rs, the same rule in every store).
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

impl From<pg_idempotency_protocol::Completion> for Completed {
    fn from(c: pg_idempotency_protocol::Completion) -> Completed {
        match c {
            pg_idempotency_protocol::Completion::Succeeded => Completed::Succeeded,
            pg_idempotency_protocol::Completion::Failed => Completed::Failed,
            pg_idempotency_protocol::Completion::Absent => Completed::Absent,
        }
    }
}

/// A record's state, in the protocol's words.
pub use pg_idempotency_protocol::State;

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

/// One scope's figures, as `metrics` lists them (a row of the SQL API's `idem_metrics()`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeMetrics {
    /// The name of the role that owns these records, as `PgStore::forget_owned_by` takes
    /// it (`PgStore`: a role sees its own rows, a role with `idempotency_admin`'s
    /// privileges every owner's). None where a store has no roles, and for the server's
    /// overflow row of counters (`(other scopes)`).
    pub owner: Option<String>,
    pub scope: String,
    /// Live records by state.
    pub in_progress: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Running claims whose lease lapsed and that nobody took over: a crashed or stuck
    /// holder (they are also counted in `in_progress`).
    pub lapsed: u64,
    /// Records past their expiry that are still stored (purge removes them).
    pub expired: u64,
    /// How long ago the oldest live running call was first claimed.
    pub oldest_in_progress: Option<Duration>,
    /// How many `begin` calls answered each outcome, since the counters started (the
    /// server's start for the extension, the store's creation for `MemoryStore`, the first
    /// count under the store's prefix for `RedisStore`). None where nothing is counted:
    /// the portable SQL variant, the extension without `shared_preload_libraries`
    /// (`note` says why).
    pub outcomes: Option<OutcomeCounts>,
    /// Why `outcomes` is None.
    pub note: Option<String>,
}

impl ScopeMetrics {
    /// A store-kept scope's row before any record is counted: no owner (such a store has no
    /// roles), and outcomes counted from zero.
    pub(crate) fn local(scope: &str) -> ScopeMetrics {
        ScopeMetrics {
            owner: None,
            scope: scope.to_string(),
            in_progress: 0,
            succeeded: 0,
            failed: 0,
            lapsed: 0,
            expired: 0,
            oldest_in_progress: None,
            outcomes: Some(OutcomeCounts::default()),
            note: None,
        }
    }

    /// Counts one stored record, as `idem_metrics()` does: an expired one only as expired;
    /// a running one also by whether its lease lapsed and by how long ago it was claimed.
    pub(crate) fn count(&mut self, state: State, expired: bool, lapsed: bool, age: Duration) {
        if expired {
            self.expired += 1;
            return;
        }
        match state {
            State::Succeeded => self.succeeded += 1,
            State::Failed => self.failed += 1,
            State::InProgress => {
                self.in_progress += 1;
                if lapsed {
                    self.lapsed += 1;
                }
                self.oldest_in_progress = self.oldest_in_progress.max(Some(age));
            }
        }
    }
}

/// How many `begin` calls answered `claimed` (a lost answer's repeat included), `replay`,
/// `in_progress` (once per call, after any wait), or were refused as a mismatch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutcomeCounts {
    pub claimed: u64,
    pub replay: u64,
    pub in_progress: u64,
    pub mismatch: u64,
}
