//! What happened in a run: one event per operation a client task invoked, with what it
//! was answered, and when (microseconds since the run started).

use serde_json::Value;

/// What a client task asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `idem_begin` of the key.
    Begin,
    /// `idem_begin` again with the claim token of this process's begin of the key just
    /// before, whose answer was lost (0.3.0): a claim it answers may be the one that begin
    /// made, so the checker reads it as having been invoked when that begin was.
    BeginRepeat,
    /// `idem_complete` with this fence and response.
    Complete { fence: i64, response: Value },
    /// `idem_release` with this fence.
    Release { fence: i64 },
    /// `idem_extend` with this fence.
    Extend { fence: i64 },
    /// The side effect, written to the ledger under this fence and upstream key.
    Effect {
        fence: i64,
        upstream_key: uuid::Uuid,
    },
}

/// What the operation was answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `idem_begin` claimed the call.
    Claimed {
        fence: i64,
        attempt: i32,
        recovered: bool,
        upstream_key: uuid::Uuid,
    },
    /// `idem_begin` replayed a remembered result.
    Replay {
        succeeded: bool,
        response: Option<Value>,
    },
    /// `idem_begin`: another attempt holds the call.
    InProgress,
    /// `idem_complete` left this state (`succeeded`, `failed` or `absent`).
    Completed { state: String },
    /// `idem_release` or `idem_extend` worked; an effect was accepted by the ledger.
    Done,
    /// A definite failure with this SQLSTATE (IK003, IK001, ...; the ledger's refusal of
    /// a stale fence is `ledger`): nothing changed.
    Failed { sqlstate: String },
    /// The outcome is unknown (an I/O error, a timeout, a killed process): the operation
    /// may have taken effect at any time from its invocation on.
    Indeterminate { why: String },
}

/// One operation of one client task on one key.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The client task (or process) that made it.
    pub process: usize,
    pub key: String,
    pub op: Op,
    /// When it was invoked, in microseconds since the run started.
    pub invoked: i64,
    /// When its answer arrived; None for an indeterminate operation (it is concurrent
    /// with everything after its invocation).
    pub returned: Option<i64>,
    pub outcome: Outcome,
}

impl Event {
    pub fn is_indeterminate(&self) -> bool {
        matches!(self.outcome, Outcome::Indeterminate { .. })
    }
}

/// A side effect as the ledger accepted it.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    pub key: String,
    pub fence: i64,
    pub upstream_key: uuid::Uuid,
    /// When the ledger accepted it, in microseconds since the run started.
    pub at: i64,
}

/// A record as stored at the end of a run (read as a superuser from the storage).
#[derive(Debug, Clone, PartialEq)]
pub struct FinalRecord {
    pub key: String,
    pub state: String,
    pub fence: i64,
    pub response: Option<Value>,
    pub expires_at: i64,
}

/// Everything a run leaves for the checker.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub events: Vec<Event>,
    pub ledger: Vec<LedgerRow>,
    pub records: Vec<FinalRecord>,
    /// The records' time to live in microseconds, when it is short enough that records may
    /// expire during the run (a new life may then begin once it has passed); None when
    /// nothing expires before the run ends.
    pub ttl_micros: Option<i64>,
    /// What the record monitor saw of the storage while the run went on (with the purge it
    /// ran alongside); None when the run had no monitor.
    pub observed: Option<Observed>,
}

/// A record as the record monitor read it from the storage table (as a superuser).
#[derive(Debug, Clone, PartialEq)]
pub struct SeenRecord {
    pub key: String,
    /// The role that owns the record (records are keyed by scope, key and owner).
    pub owner: String,
    pub state: String,
    pub fence: i64,
    pub attempt: i32,
    /// Names the record's life: kept by takeovers, new with a fresh claim.
    pub upstream_key: uuid::Uuid,
    /// On the server's clock, in microseconds since the run started.
    pub expires_at: i64,
}

/// One read of the storage table: every record of the run's scope at that moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Poll {
    /// The server's clock (`clock_timestamp()`) in the statement that read the table, in
    /// microseconds since the run started: the read's snapshot is no later than this.
    pub at: i64,
    pub records: Vec<SeenRecord>,
}

/// What the record monitor saw, in poll order, and how often the records were purged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The purge interval in force during the run (the extension's
    /// `pg_idempotency.purge_interval`, or how often `idem_purge_expired` was called).
    pub purge_interval_micros: i64,
    pub polls: Vec<Poll>,
}
