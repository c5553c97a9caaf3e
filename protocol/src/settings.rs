//! The settings of pg_idempotency: each one's name, default, range and unit, said once.
//!
//! The extension registers its GUCs from these; the PL/pgSQL variant reads the default
//! settings under the same names and keeps the limits in its `settings` table with the same
//! ranges; the client's own stores (memory, Redis) check calls against the same defaults;
//! docs/settings.md lists them (a test holds the page to this table).

/// Who may change a setting, and when it takes effect (PostgreSQL's GUC contexts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// Any session may SET it.
    Session,
    /// Only a superuser may SET it; postgresql.conf sets it for everyone.
    Superuser,
    /// postgresql.conf (or ALTER SYSTEM), on reload.
    Reload,
    /// postgresql.conf, at server start.
    ServerStart,
}

/// How a number is read and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Plain,
    Bytes,
    Seconds,
}

/// An integer setting.
#[derive(Debug, Clone, Copy)]
pub struct IntSetting {
    /// The GUC's name, `pg_idempotency.` included.
    pub name: &'static str,
    pub default: i32,
    pub min: i32,
    pub max: i32,
    pub unit: Unit,
    pub context: Context,
    /// One line: what it is.
    pub short: &'static str,
    /// What a user should know besides.
    pub long: &'static str,
}

impl IntSetting {
    /// The name without the `pg_idempotency.` prefix (a column of the portable `settings`).
    pub fn short_name(&self) -> &'static str {
        self.name.trim_start_matches("pg_idempotency.")
    }
}

pub const MAX_KEY_BYTES: IntSetting = IntSetting {
    name: "pg_idempotency.max_key_bytes",
    default: 512,
    min: 1,
    max: 2048,
    unit: Unit::Plain,
    context: Context::Superuser,
    short: "Longest accepted idempotency key, in bytes.",
    long: "Longer keys are refused with SQLSTATE 22023.",
};

pub const MAX_SCOPE_BYTES: IntSetting = IntSetting {
    name: "pg_idempotency.max_scope_bytes",
    default: 128,
    min: 1,
    max: 512,
    unit: Unit::Plain,
    context: Context::Superuser,
    short: "Longest accepted scope (tool or action name), in bytes.",
    long: "Longer scopes are refused with SQLSTATE 22023.",
};

pub const MAX_TTL: IntSetting = IntSetting {
    name: "pg_idempotency.max_ttl",
    default: 30 * 24 * 3600,
    min: 1,
    max: i32::MAX,
    unit: Unit::Seconds,
    context: Context::Superuser,
    short: "Longest ttl, lease or wait a call may ask for.",
    long: "Larger values are refused with SQLSTATE 22023.",
};

pub const MAX_RESPONSE_BYTES: IntSetting = IntSetting {
    name: "pg_idempotency.max_response_bytes",
    default: 1024 * 1024,
    min: 0,
    max: i32::MAX,
    unit: Unit::Bytes,
    context: Context::Superuser,
    short: "Largest response idem_complete stores, in bytes of its jsonb form.",
    long: "Larger responses are refused with SQLSTATE IK004.",
};

pub const DEFAULT_TTL: IntSetting = IntSetting {
    name: "pg_idempotency.default_ttl",
    default: 3600,
    min: 1,
    max: i32::MAX,
    unit: Unit::Seconds,
    context: Context::Session,
    short: "How long a call is remembered when idem_begin gives no ttl.",
    long: "Counted from the claim, and again from the completion.",
};

pub const UNRESOLVED_TTL: IntSetting = IntSetting {
    name: "pg_idempotency.unresolved_ttl",
    default: 604_800,
    min: 1,
    max: i32::MAX,
    unit: Unit::Seconds,
    context: Context::Session,
    short: "How long past its ttl a record whose outcome is unknown is kept when idem_begin gives no unresolved_ttl.",
    long: "A claim whose lease lapsed, or a mark (outcome_unknown, unrecorded), is taken over or replayed, never claimed afresh, until an operator resolves it or this passes: counted from the lease's end, or from the mark's completion; capped by max_ttl.",
};

pub const DEFAULT_LEASE: IntSetting = IntSetting {
    name: "pg_idempotency.default_lease",
    default: 60,
    min: 1,
    max: i32::MAX,
    unit: Unit::Seconds,
    context: Context::Session,
    short: "How long a claim is held when idem_begin gives no lease.",
    long: "Capped by the call's ttl; a holder extends it with idem_extend.",
};

pub const PURGE_INTERVAL: IntSetting = IntSetting {
    name: "pg_idempotency.purge_interval",
    default: 60,
    min: 0,
    max: i32::MAX,
    unit: Unit::Seconds,
    context: Context::Reload,
    short: "Seconds between the purge worker's runs; 0 turns it off.",
    long: "Takes effect on reload. The worker runs only when pg_idempotency is preloaded.",
};

pub const PURGE_BATCH_SIZE: IntSetting = IntSetting {
    name: "pg_idempotency.purge_batch_size",
    default: 10_000,
    min: 1,
    max: i32::MAX,
    unit: Unit::Plain,
    context: Context::Superuser,
    short: "How many expired rows one purge statement deletes at most.",
    long: "Used by the purge worker and by idem_purge_expired() without a batch_size. \
           Smaller batches hold fewer row locks for less time.",
};

pub const COUNT_OUTCOMES: IntSetting = IntSetting {
    name: "pg_idempotency.count_outcomes",
    default: 1,
    min: 0,
    max: 1,
    unit: Unit::Plain,
    context: Context::Session,
    short: "1: count each call's outcome per owner and scope (idem_metrics); 0: count nothing.",
    long: "A session's own calls only. Counting writes one row per owner, scope and backend: \
           0 is for measuring what counting costs.",
};

pub const COUNT_FLUSH_INTERVAL_MS: IntSetting = IntSetting {
    name: "pg_idempotency.count_flush_interval_ms",
    default: 1000,
    min: 0,
    max: 3_600_000,
    unit: Unit::Plain,
    context: Context::Session,
    short: "Extension: the longest a backend keeps the counts of answers that write nothing \
            (replays, running) before a call writes them; 0: every call.",
    long: "Counts reach the counts table with the backend's next claim or completion, or its \
           first call this many milliseconds after its last write. The portable variant \
           writes every call's count in its transaction and ignores it.",
};

pub const METRICS_RECORDS: IntSetting = IntSetting {
    name: "pg_idempotency.metrics_records",
    default: 1,
    min: 0,
    max: 1,
    unit: Unit::Plain,
    context: Context::Session,
    short: "1: idem_metrics() reads the records (live, lapsed, expired); 0: the counts only.",
    long: "0 makes a scrape of the counts cheap however many records are stored: the \
           records' columns are NULL and the note says why.",
};

pub const METRICS_SCOPE_LIMIT: IntSetting = IntSetting {
    name: "pg_idempotency.metrics_scope_limit",
    default: 0,
    min: 0,
    max: i32::MAX,
    unit: Unit::Plain,
    context: Context::Session,
    short: "Most (owner, scope) rows idem_metrics() shows; 0: every one.",
    long: "The busiest are shown; the rest of each owner fold into one row named \
           '(other scopes)' whose folded_scopes says how many it holds.",
};

/// The database the purge worker purges (a string setting, read at server start).
pub const DATABASE_NAME: &str = "pg_idempotency.database";
pub const DATABASE_DEFAULT: &str = "postgres";

/// Every integer setting, in the order docs/settings.md lists them.
pub const INT_SETTINGS: [IntSetting; 13] = [
    MAX_KEY_BYTES,
    MAX_SCOPE_BYTES,
    MAX_TTL,
    MAX_RESPONSE_BYTES,
    DEFAULT_TTL,
    DEFAULT_LEASE,
    UNRESOLVED_TTL,
    PURGE_INTERVAL,
    PURGE_BATCH_SIZE,
    COUNT_OUTCOMES,
    COUNT_FLUSH_INTERVAL_MS,
    METRICS_RECORDS,
    METRICS_SCOPE_LIMIT,
];

/// Microseconds in a second, for the settings kept in seconds.
pub const MICROS_PER_SECOND: i64 = 1_000_000;
