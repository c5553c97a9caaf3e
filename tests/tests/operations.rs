//! Running the product: its purge (worker, pg_cron, by hand), loading, backups and the
//! portable variant's scripts, one module per area (operations/<module>.rs), linked as one
//! test binary. The modules run side by side; what they share is said below.
//!
//! - dump_restore: pg_dump / pg_restore bring back the records and the fence sequence
//! - pg_cron: pg_cron runs the purge (where the server has pg_cron)
//! - portable: the portable variant's install, uninstall and move to the extension
//! - preload: the library loaded without shared_preload_libraries (a throwaway server)
//! - purge_batch_size: the purge's batch setting, on both backends
//! - purge_race: a purge racing claims never removes a live claim
//! - worker: the purge worker: purges, survives termination, follows its interval

/// Lets the tests that purge the suite's database run one at a time: purge_race's
/// `idem_purge_expired()` removes the expired records of every scope, again and again,
/// while purge_batch_size counts expired records of its own that must stay until its
/// purge. (The worker purges its own database, pgidem_worker, only.)
fn purges_alone() -> std::sync::MutexGuard<'static, ()> {
    static PURGES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it does not fail the others.
    PURGES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[path = "operations/dump_restore.rs"]
mod dump_restore;
#[path = "operations/pg_cron.rs"]
mod pg_cron;
#[path = "operations/portable.rs"]
mod portable;
#[path = "operations/preload.rs"]
mod preload;
#[path = "operations/purge_batch_size.rs"]
mod purge_batch_size;
#[path = "operations/purge_race.rs"]
mod purge_race;
#[path = "operations/worker.rs"]
mod worker;
