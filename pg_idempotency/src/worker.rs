//! The purge worker: a thin loop over the purge that anyone can run by hand.
//!
//! Registered only while `shared_preload_libraries` is processed. Every
//! `pg_idempotency.purge_interval` seconds it purges `pg_idempotency.database`, one batch per
//! transaction (`pg_idempotency.purge_batch_size` rows at most) so that no row stays locked
//! longer than one batch. It waits quietly while the
//! extension does not exist there. On SIGTERM it exits with code 1: a server shutdown ends
//! it for good, and after `pg_terminate_backend` the postmaster starts it again, so the
//! database is never left without a purger.

use std::time::Duration;

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;
use pgrx::PgTryBuilder;

use crate::clock;
use crate::gucs;
use crate::purge::{self, Cursor};

const NAME: &str = "pg_idempotency purger";
/// How long the worker sleeps at most between checks (for a changed interval, a new
/// extension, a signal): short enough to notice, long enough not to be busy.
const NAP: Duration = Duration::from_secs(1);

pub fn register() {
    BackgroundWorkerBuilder::new(NAME)
        .set_type(NAME)
        .set_function("idem_purge_worker_main")
        .set_library("pg_idempotency")
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(Some(Duration::from_secs(10)))
        .load();
}

// SAFETY (no_mangle): the symbol's name carries our prefix, so no other library defines
// it; the postmaster finds it by that name (set_function above).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idem_purge_worker_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = gucs::database();
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    // SAFETY: a 'static NUL-terminated name, copied into this backend's status entry, which
    // exists now that the worker is connected.
    unsafe { pg_sys::pgstat_report_appname(c"pg_idempotency purger".as_ptr()) };
    pgrx::log!("{NAME} started: purging database \"{database}\"");

    let mut waited = Duration::ZERO;
    // Whether the last run found no extension to purge.
    let mut missing = false;
    let mut reported = None;
    loop {
        if !BackgroundWorker::wait_latch(Some(NAP)) || BackgroundWorker::sigterm_received() {
            break;
        }
        if BackgroundWorker::sighup_received() {
            // SAFETY: the worker's main loop, between transactions, is where a backend
            // rereads the configuration after SIGHUP, as PostgresMain does.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        waited += NAP;
        let interval = gucs::purge_interval_secs();
        if interval != 0 && waited >= Duration::from_secs(interval) {
            waited = Duration::ZERO;
            missing = run_once(&database, missing);
        }
        let shown = Shown { interval, missing };
        if reported != Some(shown) {
            report(shown, &database);
            reported = Some(shown);
        }
    }
    pgrx::log!("{NAME} stopping");
    // Exit code 1, not 0: the postmaster restarts a worker that exits with 1 unless the
    // server is shutting down (pg_terminate_backend must not leave us without a purger).
    // SAFETY: proc_exit runs PostgreSQL's exit callbacks and ends the process: the values
    // still live here (the database name) need no destructor run.
    unsafe { pg_sys::proc_exit(1) };
}

/// What the worker shows as its activity: the interval in force, and whether its last run
/// found the extension missing.
#[derive(Clone, Copy, PartialEq)]
struct Shown {
    interval: u64,
    missing: bool,
}

/// Shows `shown` as the worker's activity in pg_stat_activity (`query`), so that an
/// operator, and a test, can see when a reload has been applied, and that the worker is
/// waiting for the extension rather than purging.
fn report(shown: Shown, database: &str) {
    let Shown { interval, missing } = shown;
    let text = if interval == 0 {
        "idle: purging is off (pg_idempotency.purge_interval = 0)".to_string()
    } else if missing {
        format!("idle: pg_idempotency is not created in \"{database}\"; looking again every {interval} s (pg_idempotency.purge_interval)")
    } else {
        format!("idle: purging every {interval} s (pg_idempotency.purge_interval)")
    };
    let text = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: a NUL-terminated string that PostgreSQL copies into this backend's status
    // entry (which exists: the worker is connected) before returning.
    unsafe { pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, text.as_ptr()) };
}

/// One run; whether it found the extension missing (`was_missing`: the run before did). An
/// error (the extension dropped mid-purge, a lock timeout) is logged and the transaction
/// rolled back; the worker carries on at its next interval instead of exiting.
fn run_once(database: &str, was_missing: bool) -> bool {
    let outcome = PgTryBuilder::new(|| {
        if !extension_exists() {
            return None;
        }
        Some(purge_all())
    })
    .catch_others(|e| {
        // SAFETY: the error was caught as a Rust value, so the transaction of the failed
        // batch (or lookup) is still open and failed; rolling it back releases its locks
        // and memory, as PostgresMain does after an error. With no transaction open it does
        // nothing.
        unsafe { pg_sys::AbortCurrentTransaction() };
        pgrx::warning!(
            "{NAME}: purge in \"{database}\" failed, retrying at the next interval: {e:?}"
        );
        Some(0)
    })
    .execute();
    match outcome {
        None => {
            if !was_missing {
                pgrx::debug1!(
                    "{NAME}: extension pg_idempotency not created in \"{database}\" yet; waiting"
                );
            }
            true
        }
        Some(purged) => {
            if purged > 0 {
                pgrx::log!("{NAME}: purged {purged} expired records in \"{database}\"");
            } else {
                pgrx::debug1!("{NAME}: nothing to purge in \"{database}\"");
            }
            false
        }
    }
}

fn extension_exists() -> bool {
    BackgroundWorker::transaction(|| {
        Spi::get_one::<bool>("SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pg_idempotency')")
            .ok()
            .flatten()
            .unwrap_or(false)
    })
}

/// Every expired row, one batch per transaction.
fn purge_all() -> i64 {
    let now = clock::now();
    let mut cursor = Some(Cursor::start());
    let mut total = 0;
    while let Some(c) = cursor {
        if BackgroundWorker::sigterm_received() {
            break;
        }
        let (n, next) = BackgroundWorker::transaction(|| {
            Spi::connect_mut(|client| purge::batch(client, c, now, gucs::purge_batch_size()))
        });
        total += n;
        cursor = next;
    }
    total
}
