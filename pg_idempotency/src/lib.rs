//! pg_idempotency: idempotency keys that live inside PostgreSQL.
//!
//! The SQL surface is written by hand in `sql/pg_idempotency.sql`; each function there names
//! a symbol declared below with `sql_function!`.

use pgrx::prelude::*;

mod args;
mod begin;
mod canonical;
mod clock;
mod entry;
mod error;
mod gucs;
mod holder;
mod lookup;
mod request;
mod store;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!();

extension_sql_file!("../sql/pg_idempotency.sql", name = "api", bootstrap);

entry::sql_function!(idem_begin, pg_finfo_idem_begin, begin::idem_begin);
entry::sql_function!(idem_complete, pg_finfo_idem_complete, holder::idem_complete);
entry::sql_function!(idem_release, pg_finfo_idem_release, holder::idem_release);
entry::sql_function!(idem_extend, pg_finfo_idem_extend, holder::idem_extend);
entry::sql_function!(idem_lookup, pg_finfo_idem_lookup, lookup::idem_lookup);
entry::sql_function!(idem_forget, pg_finfo_idem_forget, lookup::idem_forget);
entry::sql_function!(
    idem_canonical,
    pg_finfo_idem_canonical,
    canonical::idem_canonical
);
entry::sql_function!(idem_hash, pg_finfo_idem_hash, canonical::idem_hash);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_idempotency'"]
    }
}
