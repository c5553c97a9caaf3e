//! Every setting of the extension: limits (superuser) and defaults (any session).
//! docs/settings.md lists the same names, defaults and ranges.

use std::ffi::CString;

use pgrx::{pg_sys, GucContext, GucFlags, GucRegistry, GucSetting};

/// Longest accepted key, in bytes.
static MAX_KEY_BYTES: GucSetting<i32> = GucSetting::<i32>::new(512);
/// Longest accepted scope, in bytes.
static MAX_SCOPE_BYTES: GucSetting<i32> = GucSetting::<i32>::new(128);
/// Longest ttl (and lease, and wait) a call may ask for, in seconds.
static MAX_TTL: GucSetting<i32> = GucSetting::<i32>::new(30 * 24 * 3600);
/// Largest stored response, in bytes of its jsonb form.
static MAX_RESPONSE_BYTES: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);
/// ttl of a call that gives none, in seconds.
static DEFAULT_TTL: GucSetting<i32> = GucSetting::<i32>::new(3600);
/// lease of a call that gives none, in seconds (capped by the call's ttl).
static DEFAULT_LEASE: GucSetting<i32> = GucSetting::<i32>::new(60);

/// Seconds between the purge worker's runs; 0 turns it off.
static PURGE_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(60);
/// The database whose records the purge worker reclaims.
static DATABASE: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

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

pub fn purge_interval_secs() -> u64 {
    PURGE_INTERVAL.get().max(0) as u64
}
pub fn database() -> String {
    DATABASE
        .get()
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".into())
}

pub fn init() {
    GucRegistry::define_int_guc(
        c"pg_idempotency.max_key_bytes",
        c"Longest accepted idempotency key, in bytes.",
        c"Longer keys are refused with SQLSTATE 22023.",
        &MAX_KEY_BYTES,
        1,
        2048,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idempotency.max_scope_bytes",
        c"Longest accepted scope (tool or action name), in bytes.",
        c"Longer scopes are refused with SQLSTATE 22023.",
        &MAX_SCOPE_BYTES,
        1,
        512,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"pg_idempotency.max_ttl",
        c"Longest ttl, lease or wait a call may ask for.",
        c"Larger values are refused with SQLSTATE 22023.",
        &MAX_TTL,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_idempotency.max_response_bytes",
        c"Largest response idem_complete stores, in bytes of its jsonb form.",
        c"Larger responses are refused with SQLSTATE IK004.",
        &MAX_RESPONSE_BYTES,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"pg_idempotency.default_ttl",
        c"How long a call is remembered when idem_begin gives no ttl.",
        c"Counted from the claim, and again from the completion.",
        &DEFAULT_TTL,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_idempotency.default_lease",
        c"How long a claim is held when idem_begin gives no lease.",
        c"Capped by the call's ttl; a holder extends it with idem_extend.",
        &DEFAULT_LEASE,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_idempotency.purge_interval",
        c"Seconds between the purge worker's runs; 0 turns it off.",
        c"Takes effect on reload. The worker runs only when pg_idempotency is preloaded.",
        &PURGE_INTERVAL,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    // A server-start setting can only be defined while the server starts: loaded later (no
    // preloading), PostgreSQL refuses it with a FATAL error that ends the session. It only
    // names the worker's database, and without preloading there is no worker.
    // SAFETY: a plain bool of this process, set by PostgreSQL while it loads the preloaded
    // libraries; read from _PG_init, on the only thread that touches it.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        GucRegistry::define_string_guc(
            c"pg_idempotency.database",
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
