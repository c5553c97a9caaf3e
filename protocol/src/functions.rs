//! Every function of the SQL API, declared once: names, argument types and defaults, result,
//! volatility, strictness, parallel safety, privileges and comment.
//!
//! From this table come the extension's `CREATE FUNCTION` text (pg_idempotency/sql/
//! functions.sql), the PL/pgSQL variant's declarations of the same functions in its
//! installer (sql/pg_idempotency.sql, around the bodies in sql/src/), both written by
//! `cargo xtask render-sql` and held equal to the rendering by
//! tests/tests/consistency/signatures.rs, and the typed argument structs the extension's C
//! functions read (pg_idempotency's build.rs). The same test holds what PostgreSQL reports
//! of both backends' functions equal.
//!
//! Adding an argument to a function means adding it here, then giving it behaviour (and,
//! once a version is released, an upgrade script for both backends).

/// A SQL type an argument or result column has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlType {
    Text,
    Jsonb,
    Interval,
    Uuid,
    Bigint,
    Integer,
    Boolean,
    Regrole,
    Timestamptz,
    Bytea,
    /// One-dimensional arrays: a batch's items, one element per item.
    TextArray,
    JsonbArray,
    UuidArray,
    BigintArray,
    BooleanArray,
}

impl SqlType {
    pub const fn sql(self) -> &'static str {
        match self {
            SqlType::Text => "text",
            SqlType::Jsonb => "jsonb",
            SqlType::Interval => "interval",
            SqlType::Uuid => "uuid",
            SqlType::Bigint => "bigint",
            SqlType::Integer => "integer",
            SqlType::Boolean => "boolean",
            SqlType::Regrole => "regrole",
            SqlType::Timestamptz => "timestamptz",
            SqlType::Bytea => "bytea",
            SqlType::TextArray => "text[]",
            SqlType::JsonbArray => "jsonb[]",
            SqlType::UuidArray => "uuid[]",
            SqlType::BigintArray => "bigint[]",
            SqlType::BooleanArray => "boolean[]",
        }
    }
}

/// One argument: its name (callers may pass it by name), type and default (SQL text).
#[derive(Debug, Clone, Copy)]
pub struct Arg {
    pub name: &'static str,
    pub ty: SqlType,
    pub default: Option<&'static str>,
}

const fn arg(name: &'static str, ty: SqlType) -> Arg {
    Arg {
        name,
        ty,
        default: None,
    }
}

const fn opt(name: &'static str, ty: SqlType, default: &'static str) -> Arg {
    Arg {
        name,
        ty,
        default: Some(default),
    }
}

/// What a function returns.
#[derive(Debug, Clone, Copy)]
pub enum Returns {
    Void,
    Scalar(SqlType),
    /// A named composite type of the storage schema (a row built from the type cache), by
    /// its name in that schema (each backend's rendering qualifies it).
    Row(&'static str),
    /// Zero or more rows of a named composite type of the storage schema, with the
    /// planner's row estimate.
    SetOf(&'static str, u32),
    /// The arguments come back as stored (INOUT), followed by these OUT columns.
    InOut(&'static [Arg]),
    /// `RETURNS TABLE (...)`.
    Table(&'static [Arg]),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Volatility {
    Immutable,
    Stable,
    Volatile,
}

/// How a function's work is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A V1 C function of the extension's library, by its symbol.
    C(&'static str),
    /// A SQL function whose body lives in `pg_idempotency/sql/bodies/<name>.sql`.
    Sql,
}

/// How the PL/pgSQL variant writes a function: its body is `sql/src/bodies/<name>.sql`, the
/// rest of its `CREATE FUNCTION` comes from this declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Portable {
    /// `LANGUAGE plpgsql`.
    Plpgsql,
    /// `LANGUAGE sql` with a quoted body, checked when it is created.
    Sql,
    /// `LANGUAGE sql` with a SQL-standard body, `RETURN <the file's expression>`: bound
    /// when it is created, through the search_path the install has then.
    SqlReturn,
    /// Not part of the variant: an internal helper of the extension (the variant has
    /// helpers of its own, written whole in sql/src/).
    Absent,
}

/// How the PL/Proxy layer (sql/proxy/) serves a function on a proxy database, in front of
/// partitions that each run either backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// On the partition of the call's scope and key (`RUN ON` their routing hash): every
    /// record lives on exactly one partition.
    ByKey,
    /// As `ByKey`; with a NULL key, by the key the partition derives from the request (the
    /// hex SHA-256 of its canonical JSON), so that a HASH_INPUT call and the same call with
    /// its key spelled out meet on one partition.
    ByKeyOrRequest,
    /// On the proxy itself, by the portable variant's SQL: the answer depends on the
    /// arguments alone, and the layer needs it to route (a HASH_INPUT call's key).
    Local,
    /// On every partition, the answers combined by `sql/proxy/src/bodies/<name>.sql`.
    All,
    /// A batch of one scope's keys: by `sql/proxy/src/bodies/<name>.sql`, which sends each
    /// partition its items in one call and answers them in the batch's order.
    Batch,
    /// Not part of the layer: an internal helper of a backend.
    Absent,
}

/// Which role may EXECUTE it (never PUBLIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// Members of idempotency_user (the API a service calls).
    User,
    /// Members of idempotency_admin (purge, policies).
    Admin,
    /// Nobody but the functions of the API that call it (an internal helper).
    Internal,
}

/// Where the function lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// The schema of the API (the extension's schema, `@extschema@`).
    Api,
    /// The storage schema `idempotency`, for internal helpers.
    Storage,
}

#[derive(Debug, Clone, Copy)]
pub struct Function {
    pub name: &'static str,
    pub schema: Schema,
    pub args: &'static [Arg],
    pub returns: Returns,
    pub volatility: Volatility,
    /// STRICT: NULL in any argument gives NULL without a call.
    pub strict: bool,
    pub parallel_safe: bool,
    pub security_definer: bool,
    pub language: Language,
    /// How the PL/pgSQL variant writes it.
    pub portable: Portable,
    /// How the PL/Proxy layer routes it.
    pub proxy: Proxy,
    pub grant: Grant,
    /// Said above the function in the SQL, for whoever reads it there.
    pub note: Option<&'static str>,
    /// COMMENT ON FUNCTION (what \df+ and the docs show).
    pub comment: Option<&'static str>,
}

impl Function {
    /// The argument types, as `DROP FUNCTION` and `COMMENT ON FUNCTION` name the function.
    pub fn identity_args(&self) -> String {
        self.args
            .iter()
            .map(|a| a.ty.sql())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The C symbol, for a C function.
    pub fn symbol(&self) -> Option<&'static str> {
        match self.language {
            Language::C(symbol) => Some(symbol),
            Language::Sql => None,
        }
    }
}

use SqlType::*;

const API: Function = Function {
    name: "",
    schema: Schema::Api,
    args: &[],
    returns: Returns::Void,
    volatility: Volatility::Volatile,
    strict: false,
    parallel_safe: false,
    security_definer: true,
    language: Language::Sql,
    portable: Portable::Plpgsql,
    proxy: Proxy::ByKey,
    grant: Grant::User,
    note: None,
    comment: None,
};

pub const IDEM_BEGIN: Function = Function {
    name: "idem_begin",
    args: &[
        arg("scope", Text),
        arg("key", Text),
        opt("request", Jsonb, "NULL"),
        opt("ttl", Interval, "NULL"),
        opt("lease", Interval, "NULL"),
        opt("on_cache_hit", Text, "NULL"),
        opt("on_mismatch", Text, "NULL"),
        opt("wait", Interval, "'0'"),
        opt("claim_token", Uuid, "NULL"),
        opt("unresolved_ttl", Interval, "NULL"),
    ],
    returns: Returns::Row("begin_result"),
    language: Language::C("idem_begin"),
    note: Some(
        "unresolved_ttl NULL: pg_idempotency.unresolved_ttl. How long past its ttl a record \
         whose outcome is unknown (a lapsed claim, a mark) is kept for an operator.",
    ),
    comment: Some(
        "Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)",
    ),
    proxy: Proxy::ByKeyOrRequest,
    ..API
};

pub const IDEM_COMPLETE: Function = Function {
    name: "idem_complete",
    args: &[
        arg("scope", Text),
        arg("key", Text),
        arg("fence", Bigint),
        arg("response", Jsonb),
        opt("succeeded", Boolean, "true"),
        opt("cache_failure", Boolean, "NULL"),
    ],
    returns: Returns::Row("complete_result"),
    language: Language::C("idem_complete"),
    comment: Some("Record the result of a claimed call; the fence must still hold the record"),
    ..API
};

pub const IDEM_RELEASE: Function = Function {
    name: "idem_release",
    args: &[arg("scope", Text), arg("key", Text), arg("fence", Bigint)],
    returns: Returns::Void,
    language: Language::C("idem_release"),
    comment: Some("Give up a claim without a result, so that the next idem_begin claims the call"),
    ..API
};

pub const IDEM_EXTEND: Function = Function {
    name: "idem_extend",
    args: &[
        arg("scope", Text),
        arg("key", Text),
        arg("fence", Bigint),
        opt("lease", Interval, "NULL"),
    ],
    returns: Returns::Row("extend_result"),
    language: Language::C("idem_extend"),
    comment: Some("Extend the lease of a claim that is still running (a heartbeat)"),
    ..API
};

pub const IDEM_LOOKUP: Function = Function {
    name: "idem_lookup",
    args: &[
        arg("scope", Text),
        arg("key", Text),
        opt("owner", Regrole, "NULL"),
    ],
    returns: Returns::SetOf("lookup_result", 1),
    language: Language::C("idem_lookup"),
    note: Some("owner NULL: the caller's own record. Naming another role needs idempotency_admin."),
    comment: Some(
        "The caller's record of a call (an admin: owner's) until it expires; no row when it is absent or expired",
    ),
    portable: Portable::Sql,
    ..API
};

pub const IDEM_FORGET: Function = Function {
    name: "idem_forget",
    args: &[
        arg("scope", Text),
        arg("key", Text),
        opt("owner", Regrole, "NULL"),
    ],
    returns: Returns::Scalar(Boolean),
    language: Language::C("idem_forget"),
    comment: Some(
        "Remove the caller's record (an admin: owner's), e.g. a bad cached result; true when a live one was removed",
    ),
    ..API
};

pub const IDEM_CANONICAL: Function = Function {
    name: "idem_canonical",
    args: &[arg("request", Jsonb)],
    returns: Returns::Scalar(Text),
    volatility: Volatility::Immutable,
    strict: true,
    parallel_safe: true,
    security_definer: false,
    language: Language::C("idem_canonical"),
    comment: Some(
        "Canonical JSON of a request: RFC 8785 with lossless numbers (what idem_hash hashes)",
    ),
    portable: Portable::SqlReturn,
    proxy: Proxy::Local,
    ..API
};

pub const IDEM_HASH: Function = Function {
    name: "idem_hash",
    args: &[arg("request", Jsonb)],
    returns: Returns::Scalar(Bytea),
    volatility: Volatility::Immutable,
    strict: true,
    parallel_safe: true,
    security_definer: false,
    language: Language::C("idem_hash"),
    comment: Some(
        "SHA-256 of the canonical JSON of a request: its fingerprint; as lowercase hex, its HASH_INPUT key",
    ),
    portable: Portable::SqlReturn,
    proxy: Proxy::Local,
    ..API
};

pub const IDEM_PURGE_EXPIRED: Function = Function {
    name: "idem_purge_expired",
    args: &[opt("batch_size", Integer, "NULL")],
    returns: Returns::Scalar(Bigint),
    language: Language::C("idem_purge_expired"),
    grant: Grant::Admin,
    note: Some("batch_size NULL: pg_idempotency.purge_batch_size, as the purge worker uses."),
    comment: Some(
        "Delete the rows of expired records, batch_size at a time; returns how many (never a live record)",
    ),
    proxy: Proxy::All,
    ..API
};

pub const IDEM_SET_POLICY: Function = Function {
    name: "idem_set_policy",
    args: &[
        arg("scope", Text),
        opt("ttl", Interval, "NULL"),
        opt("lease", Interval, "NULL"),
        opt("on_cache_hit", Text, "NULL"),
        opt("cache_failures", Boolean, "NULL"),
        opt("on_mismatch", Text, "NULL"),
        opt("unresolved_ttl", Interval, "NULL"),
    ],
    returns: Returns::InOut(&[arg("updated_at", Timestamptz), arg("updated_by", Regrole)]),
    language: Language::C("idem_set_policy"),
    grant: Grant::Admin,
    note: Some("INOUT: the policy comes back as stored (durations normalised)."),
    comment: Some(
        "Set (replace) the policy of a scope: the defaults every caller of that scope obeys",
    ),
    proxy: Proxy::All,
    ..API
};

pub const IDEM_DROP_POLICY: Function = Function {
    name: "idem_drop_policy",
    args: &[arg("scope", Text)],
    returns: Returns::Scalar(Boolean),
    language: Language::C("idem_drop_policy"),
    grant: Grant::Admin,
    comment: Some("Remove the policy of a scope; true when it had one"),
    proxy: Proxy::All,
    ..API
};

/// The columns of a scope's policy, as idem_policies lists them.
const POLICY_COLUMNS: &[Arg] = &[
    arg("scope", Text),
    arg("ttl", Interval),
    arg("lease", Interval),
    arg("on_cache_hit", Text),
    arg("cache_failures", Boolean),
    arg("on_mismatch", Text),
    arg("unresolved_ttl", Interval),
    arg("updated_at", Timestamptz),
    arg("updated_by", Regrole),
];

pub const IDEM_POLICIES: Function = Function {
    name: "idem_policies",
    returns: Returns::Table(POLICY_COLUMNS),
    volatility: Volatility::Stable,
    parallel_safe: true,
    comment: Some("Every scope's policy"),
    portable: Portable::Sql,
    proxy: Proxy::All,
    ..API
};

/// Internal, up to 0.7.0: the outcome counters in shared memory (only when preloaded). The
/// library keeps its symbol, answering no rows, for a 0.7.0 catalogue not yet updated;
/// 0.8.0 drops the function (the counts are the `counts` table's).
pub const IDEM_OWNER_COUNTERS: Function = Function {
    name: "_idem_counters",
    schema: Schema::Storage,
    returns: Returns::Table(&[
        arg("owner", Regrole),
        arg("scope", Text),
        arg("claimed", Bigint),
        arg("replay", Bigint),
        arg("in_progress", Bigint),
        arg("mismatch", Bigint),
    ]),
    parallel_safe: true,
    security_definer: false,
    language: Language::C("idem_owner_counters"),
    grant: Grant::Internal,
    note: Some(
        "Outcome counters since the server started (shared memory; only when preloaded), and \
         whose rows idem_metrics shows the caller.",
    ),
    portable: Portable::Absent,
    proxy: Proxy::Absent,
    ..API
};

/// Internal: whether this session counts outcomes (pg_idempotency.count_outcomes; up to
/// 0.7.0: whether the library was preloaded).
pub const IDEM_COUNTING: Function = Function {
    name: "_idem_counting",
    schema: Schema::Storage,
    returns: Returns::Scalar(Boolean),
    parallel_safe: true,
    security_definer: false,
    language: Language::C("idem_counting"),
    grant: Grant::Internal,
    portable: Portable::Absent,
    proxy: Proxy::Absent,
    ..API
};

/// Internal: whose records and counters the caller may see.
pub const IDEM_VISIBLE_OWNER: Function = Function {
    name: "_idem_visible_owner",
    schema: Schema::Storage,
    returns: Returns::Scalar(Regrole),
    parallel_safe: true,
    security_definer: false,
    language: Language::C("idem_visible_owner"),
    grant: Grant::Internal,
    note: Some(
        "NULL: every owner's (the caller has idempotency_admin's privileges); else the caller.",
    ),
    portable: Portable::Absent,
    proxy: Proxy::Absent,
    ..API
};

pub const IDEM_METRICS: Function = Function {
    name: "idem_metrics",
    returns: Returns::Table(&[
        arg("owner", Regrole),
        arg("scope", Text),
        arg("in_progress", Bigint),
        arg("succeeded", Bigint),
        arg("failed", Bigint),
        arg("lapsed", Bigint),
        arg("expired", Bigint),
        arg("oldest_in_progress", Interval),
        arg("claimed_total", Bigint),
        arg("replay_total", Bigint),
        arg("in_progress_total", Bigint),
        arg("mismatch_total", Bigint),
        arg("note", Text),
        // 0.8.0: refusals and the client's marks, and how many pairs a folded row holds.
        arg("refused_total", Bigint),
        arg("unrecorded_total", Bigint),
        arg("outcome_unknown_total", Bigint),
        arg("folded_scopes", Bigint),
    ]),
    parallel_safe: true,
    comment: Some(
        "Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and durable outcome counts (claims, replays, running, refusals, the client's marks); past pg_idempotency.metrics_scope_limit rows, the rest fold into '(other scopes)' rows that say how many they hold",
    ),
    portable: Portable::Sql,
    proxy: Proxy::All,
    ..API
};

/// The operators' functions for records whose outcome is unknown: not routed by the
/// PL/Proxy layer (an operator runs them on each partition).
pub const IDEM_UNRESOLVED: Function = Function {
    name: "idem_unresolved",
    args: &[opt("owner", Regrole, "NULL")],
    returns: Returns::SetOf("unresolved_record", 100),
    volatility: Volatility::Stable,
    note: Some(
        "owner NULL: the caller's own records (an admin: every owner's). Naming another role \
         needs idempotency_admin.",
    ),
    comment: Some(
        "The records awaiting an operator's decision: a claim whose lease lapsed, or a mark (outcome_unknown, unrecorded); kept past their ttl until resolved or until their unresolved bound",
    ),
    portable: Portable::Sql,
    proxy: Proxy::Absent,
    ..API
};

pub const IDEM_RESOLVE: Function = Function {
    name: "idem_resolve",
    args: &[
        arg("scope", Text),
        arg("key", Text),
        arg("fence", Bigint),
        arg("state", Text),
        arg("action", Text),
        opt("response", Jsonb, "NULL"),
        opt("owner", Regrole, "NULL"),
    ],
    returns: Returns::Scalar(Text),
    note: Some(
        "action: succeeded or failed (record the result found), release (the next call runs \
         again) or forget. fence and state as idem_unresolved listed them: a record that \
         changed since is refused (IK003).",
    ),
    comment: Some(
        "Settle a record awaiting a decision (as idem_unresolved listed it) and write who did it into the audit; answers the state left (succeeded, failed or absent)",
    ),
    portable: Portable::Sql,
    proxy: Proxy::Absent,
    ..API
};

pub const IDEM_RESOLUTIONS: Function = Function {
    name: "idem_resolutions",
    args: &[opt("owner", Regrole, "NULL")],
    returns: Returns::SetOf("resolutions", 100),
    volatility: Volatility::Stable,
    note: Some("owner NULL: the caller's own records' (an admin: every owner's)."),
    comment: Some(
        "The audit of idem_resolve: who resolved which record, when, how, and the record before, newest first",
    ),
    portable: Portable::Sql,
    proxy: Proxy::Absent,
    ..API
};

/// The most items one batch call (`idem_begin_batch`, `idem_complete_batch`) takes: its
/// claims hold their row locks until the statement's transaction ends, so a batch is kept
/// to what one round trip should carry.
pub const MAX_BATCH_ITEMS: usize = 1000;

/// One item's answer in `idem_begin_batch`: its position in the arrays given (from 1), then
/// `idem_begin`'s columns, key last as there.
const BEGIN_BATCH_COLUMNS: &[Arg] = &[
    arg("item", Integer),
    arg("outcome", Text),
    arg("fence", Bigint),
    arg("attempt", Integer),
    arg("recovered", Boolean),
    arg("upstream_key", Uuid),
    arg("succeeded", Boolean),
    arg("response", Jsonb),
    arg("lease_until", Timestamptz),
    arg("expires_at", Timestamptz),
    arg("retry_after", Interval),
    arg("key", Text),
];

pub const IDEM_BEGIN_BATCH: Function = Function {
    name: "idem_begin_batch",
    args: &[
        arg("scope", Text),
        arg("keys", TextArray),
        opt("requests", JsonbArray, "NULL"),
        opt("ttl", Interval, "NULL"),
        opt("lease", Interval, "NULL"),
        opt("on_cache_hit", Text, "NULL"),
        opt("on_mismatch", Text, "NULL"),
        opt("claim_tokens", UuidArray, "NULL"),
    ],
    returns: Returns::Table(BEGIN_BATCH_COLUMNS),
    language: Language::C("idem_begin_batch"),
    note: Some(
        "keys[i], requests[i] and claim_tokens[i] are item i (a NULL key: derived from its \
         request). Items are claimed in key order, answered in item order; a mismatch or a \
         refused repeat is that item's outcome, a bad argument fails the whole batch.",
    ),
    comment: Some(
        "idem_begin for many calls of one scope in one round trip: one row per item (claimed, replay, in_progress, mismatch or refused)",
    ),
    proxy: Proxy::Batch,
    ..API
};

/// One item's answer in `idem_complete_batch`.
const COMPLETE_BATCH_COLUMNS: &[Arg] = &[
    arg("item", Integer),
    arg("key", Text),
    arg("outcome", Text),
    arg("state", Text),
    arg("expires_at", Timestamptz),
];

pub const IDEM_COMPLETE_BATCH: Function = Function {
    name: "idem_complete_batch",
    args: &[
        arg("scope", Text),
        arg("keys", TextArray),
        arg("fences", BigintArray),
        arg("responses", JsonbArray),
        opt("succeeded", BooleanArray, "NULL"),
        opt("cache_failure", BooleanArray, "NULL"),
    ],
    returns: Returns::Table(COMPLETE_BATCH_COLUMNS),
    language: Language::C("idem_complete_batch"),
    note: Some(
        "Item i is (keys[i], fences[i], responses[i], succeeded[i], cache_failure[i]); \
         succeeded NULL: every item succeeded. A lost lease is that item's outcome \
         (lease_lost); the others are completed.",
    ),
    comment: Some(
        "idem_complete for many claims of one scope in one round trip: one row per item (completed, with the state left, or lease_lost)",
    ),
    proxy: Proxy::Batch,
    ..API
};

/// Every function, in the order the install creates them (a SQL function's body is checked
/// at creation, so the internal helpers come before idem_metrics).
pub const FUNCTIONS: &[Function] = &[
    IDEM_BEGIN,
    IDEM_COMPLETE,
    IDEM_BEGIN_BATCH,
    IDEM_COMPLETE_BATCH,
    IDEM_RELEASE,
    IDEM_EXTEND,
    IDEM_LOOKUP,
    IDEM_FORGET,
    IDEM_CANONICAL,
    IDEM_HASH,
    IDEM_PURGE_EXPIRED,
    IDEM_SET_POLICY,
    IDEM_DROP_POLICY,
    IDEM_POLICIES,
    IDEM_COUNTING,
    IDEM_VISIBLE_OWNER,
    IDEM_METRICS,
    IDEM_UNRESOLVED,
    IDEM_RESOLVE,
    IDEM_RESOLUTIONS,
];

/// The functions a caller sees (the API of both backends), without the internal helpers.
pub fn api() -> impl Iterator<Item = &'static Function> {
    FUNCTIONS.iter().filter(|f| f.schema == Schema::Api)
}

/// A function by name.
pub fn named(name: &str) -> Option<&'static Function> {
    FUNCTIONS.iter().find(|f| f.name == name)
}
