//! Every setting of the extension: limits (superuser) and defaults (any session), registered
//! from their one declaration in protocol/src/settings.rs (docs/settings.md lists them).

use std::ffi::{CStr, CString};

use pg_idempotency_protocol::settings::{self, Context, IntSetting, Unit};
use pgrx::{pg_sys, GucContext, GucFlags, GucRegistry, GucSetting};

/// The value of each integer setting; names, defaults and ranges are protocol's.
static MAX_KEY_BYTES: GucSetting<i32> = GucSetting::<i32>::new(settings::MAX_KEY_BYTES.default);
static MAX_SCOPE_BYTES: GucSetting<i32> = GucSetting::<i32>::new(settings::MAX_SCOPE_BYTES.default);
static MAX_TTL: GucSetting<i32> = GucSetting::<i32>::new(settings::MAX_TTL.default);
static MAX_RESPONSE_BYTES: GucSetting<i32> =
    GucSetting::<i32>::new(settings::MAX_RESPONSE_BYTES.default);
static DEFAULT_TTL: GucSetting<i32> = GucSetting::<i32>::new(settings::DEFAULT_TTL.default);
static DEFAULT_LEASE: GucSetting<i32> = GucSetting::<i32>::new(settings::DEFAULT_LEASE.default);
static UNRESOLVED_TTL: GucSetting<i32> = GucSetting::<i32>::new(settings::UNRESOLVED_TTL.default);
static PURGE_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(settings::PURGE_INTERVAL.default);
static PURGE_BATCH_SIZE: GucSetting<i32> =
    GucSetting::<i32>::new(settings::PURGE_BATCH_SIZE.default);
static COUNT_OUTCOMES: GucSetting<i32> = GucSetting::<i32>::new(settings::COUNT_OUTCOMES.default);
static COUNT_FLUSH_INTERVAL_MS: GucSetting<i32> =
    GucSetting::<i32>::new(settings::COUNT_FLUSH_INTERVAL_MS.default);
static METRICS_RECORDS: GucSetting<i32> = GucSetting::<i32>::new(settings::METRICS_RECORDS.default);
static METRICS_SCOPE_LIMIT: GucSetting<i32> =
    GucSetting::<i32>::new(settings::METRICS_SCOPE_LIMIT.default);

/// The database whose records the purge worker reclaims.
static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// Each setting with the variable that holds it, in registration order.
fn int_settings() -> [(&'static IntSetting, &'static GucSetting<i32>); 13] {
    [
        (&settings::MAX_KEY_BYTES, &MAX_KEY_BYTES),
        (&settings::MAX_SCOPE_BYTES, &MAX_SCOPE_BYTES),
        (&settings::MAX_TTL, &MAX_TTL),
        (&settings::MAX_RESPONSE_BYTES, &MAX_RESPONSE_BYTES),
        (&settings::DEFAULT_TTL, &DEFAULT_TTL),
        (&settings::DEFAULT_LEASE, &DEFAULT_LEASE),
        (&settings::UNRESOLVED_TTL, &UNRESOLVED_TTL),
        (&settings::PURGE_INTERVAL, &PURGE_INTERVAL),
        (&settings::PURGE_BATCH_SIZE, &PURGE_BATCH_SIZE),
        (&settings::COUNT_OUTCOMES, &COUNT_OUTCOMES),
        (&settings::COUNT_FLUSH_INTERVAL_MS, &COUNT_FLUSH_INTERVAL_MS),
        (&settings::METRICS_RECORDS, &METRICS_RECORDS),
        (&settings::METRICS_SCOPE_LIMIT, &METRICS_SCOPE_LIMIT),
    ]
}

const SECOND: i64 = 1_000_000;

pub fn max_key_bytes() -> usize {
    MAX_KEY_BYTES.get() as usize
}
pub fn max_scope_bytes() -> usize {
    MAX_SCOPE_BYTES.get() as usize
}
pub fn max_ttl_micros() -> i64 {
    MAX_TTL.get() as i64 * SECOND
}
pub fn max_response_bytes() -> usize {
    MAX_RESPONSE_BYTES.get() as usize
}
pub fn default_ttl_micros() -> i64 {
    DEFAULT_TTL.get() as i64 * SECOND
}
pub fn default_lease_micros() -> i64 {
    DEFAULT_LEASE.get() as i64 * SECOND
}

pub fn unresolved_ttl_micros() -> i64 {
    UNRESOLVED_TTL.get() as i64 * SECOND
}

pub fn purge_batch_size() -> i64 {
    PURGE_BATCH_SIZE.get().max(1) as i64
}
pub fn count_outcomes() -> bool {
    COUNT_OUTCOMES.get() != 0
}
pub fn count_flush_interval() -> std::time::Duration {
    std::time::Duration::from_millis(COUNT_FLUSH_INTERVAL_MS.get().max(0) as u64)
}
pub fn purge_interval_secs() -> u64 {
    PURGE_INTERVAL.get().max(0) as u64
}
pub fn database() -> String {
    DATABASE
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".into())
}

/// A C string that lives as long as the backend: PostgreSQL keeps the pointers a GUC is
/// defined with. Made once per setting, at load.
fn leaked(text: &str) -> &'static CStr {
    Box::leak(
        CString::new(text)
            .unwrap_or_else(|_| unreachable!("protocol's texts have no NUL"))
            .into_boxed_c_str(),
    )
}

fn context(c: Context) -> GucContext {
    match c {
        Context::Session => GucContext::Userset,
        Context::Superuser => GucContext::Suset,
        Context::Reload => GucContext::Sighup,
        Context::ServerStart => GucContext::Postmaster,
    }
}

fn flags(u: Unit) -> GucFlags {
    match u {
        Unit::Plain => GucFlags::default(),
        Unit::Bytes => GucFlags::UNIT_BYTE,
        Unit::Seconds => GucFlags::UNIT_S,
    }
}

pub fn init() {
    for (s, value) in int_settings() {
        GucRegistry::define_int_guc(
            leaked(s.name),
            leaked(s.short),
            leaked(s.long),
            value,
            s.min,
            s.max,
            context(s.context),
            flags(s.unit),
        );
    }
    // A server-start setting can only be defined while the server starts: loaded later (no
    // preloading), PostgreSQL refuses it with a FATAL error that ends the session. It only
    // names the worker's database, and without preloading there is no worker.
    // SAFETY: a plain bool of this process, set by PostgreSQL while it loads the preloaded
    // libraries; read from _PG_init, on the only thread that touches it.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_string_guc(
            leaked(settings::DATABASE_NAME),
            c"The database whose expired records the purge worker deletes.",
            c"The worker waits quietly until the extension exists there.",
            &DATABASE,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    // SAFETY: a 'static NUL-terminated prefix, which PostgreSQL copies; called from _PG_init
    // after the prefix's settings are defined, as it must be.
    unsafe { pg_sys::MarkGUCPrefixReserved(c"pg_idempotency".as_ptr()) };
}
