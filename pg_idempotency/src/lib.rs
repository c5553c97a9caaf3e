//! pg_idempotency: idempotency keys that live inside PostgreSQL.
//!
//! The SQL surface is `sql/storage.sql` (schema, tables, types, roles; by hand) and
//! `sql/functions.sql` (rendered from the one declaration of each function in
//! protocol/src/functions.rs); each C function there names a symbol declared below with
//! `sql_function!`, whose body reads its arguments through the struct that build.rs
//! generates from the same declaration (`call_args`).

use pgrx::prelude::*;

mod args;
mod batch_args;
mod begin;
mod begin_batch;
mod call_args;
mod canonical;
mod clock;
mod complete_batch;
mod durability;
mod entry;
mod error;
mod estimates;
mod fenced;
mod fetch;
mod gucs;
mod ids;
mod lookup;
mod metrics;
mod policy;
mod policy_cache;
mod purge;
mod record;
mod record_columns;
mod relations;
mod request;
mod roles;
mod store;
mod worker;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!();

extension_sql_file!("../sql/storage.sql", name = "storage", bootstrap);
extension_sql_file!("../sql/functions.sql", name = "functions", finalize);

entry::sql_function!(idem_begin, pg_finfo_idem_begin, begin::idem_begin);
entry::sql_function!(idem_complete, pg_finfo_idem_complete, fenced::idem_complete);
entry::sql_function!(
    idem_begin_batch,
    pg_finfo_idem_begin_batch,
    begin_batch::idem_begin_batch
);
entry::sql_function!(
    idem_complete_batch,
    pg_finfo_idem_complete_batch,
    complete_batch::idem_complete_batch
);
entry::sql_function!(idem_release, pg_finfo_idem_release, fenced::idem_release);
entry::sql_function!(idem_extend, pg_finfo_idem_extend, fenced::idem_extend);
entry::sql_function!(idem_lookup, pg_finfo_idem_lookup, lookup::idem_lookup);
entry::sql_function!(idem_forget, pg_finfo_idem_forget, lookup::idem_forget);
entry::sql_function!(
    idem_canonical,
    pg_finfo_idem_canonical,
    canonical::idem_canonical
);
entry::sql_function!(idem_hash, pg_finfo_idem_hash, canonical::idem_hash);
entry::sql_function!(
    idem_purge_expired,
    pg_finfo_idem_purge_expired,
    purge::idem_purge_expired
);
entry::sql_function!(
    idem_set_policy,
    pg_finfo_idem_set_policy,
    policy::idem_set_policy
);
entry::sql_function!(
    idem_drop_policy,
    pg_finfo_idem_drop_policy,
    policy::idem_drop_policy
);
// Bound only by 0.1.0's script, which must still install on the way to an update.
entry::sql_function!(idem_counters, pg_finfo_idem_counters, entry::outside_window);
entry::sql_function!(
    idem_owner_counters,
    pg_finfo_idem_owner_counters,
    metrics::idem_owner_counters
);
entry::sql_function!(
    idem_visible_owner,
    pg_finfo_idem_visible_owner,
    lookup::idem_visible_owner
);
entry::sql_function!(
    idem_counting,
    pg_finfo_idem_counting,
    metrics::idem_counting
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
    // SAFETY: both are plain variables of this process, set by PostgreSQL before it loads
    // the library (whether preloading is under way; which parallel worker this is, -1 for
    // none) and read here on the only thread that touches them.
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    // SAFETY: as above.
    let parallel_worker = unsafe { pg_sys::ParallelWorkerNumber } >= 0;
    if preloading {
        estimates::init();
        worker::register();
    } else if !parallel_worker {
        warn_not_preloaded();
    }
}

/// Loaded by a session's first call (or CREATE EXTENSION, or LOAD) rather than at server
/// start: the API works (outcomes are counted too), but nothing purges in the background.
/// Said once per backend, as a WARNING the session sees (pg_cron refuses to load at all;
/// the SQL API does not need preloading, so this only warns). Parallel workers load the
/// library too: their leader has warned already.
fn warn_not_preloaded() {
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        "pg_idempotency is loaded without shared_preload_libraries",
        "_PG_init",
    )
    .set_detail("The SQL API works (idem_metrics() counts outcomes too), but no purge worker runs.")
    .set_hint(
        "Add pg_idempotency to shared_preload_libraries in postgresql.conf and restart the \
         server, or schedule SELECT idem_purge_expired() with pg_cron.",
    )
    .report(PgLogLevel::WARNING);
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_idempotency'"]
    }
}
