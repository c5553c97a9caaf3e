//! F4, server processes killed: while client tasks race on a few keys through plain SQL
//! (lease 300 ms, so that calls cut short are taken over during the run), a killer sends
//! SIGKILL to one of the tasks' backends, picked at random. The postmaster answers a killed
//! backend with a crash restart: it ends every session and runs crash recovery before it
//! accepts connections again, so every task sees its connection break (an unknown outcome)
//! and connects again. A second test (extension only) aims the kills at the purge worker
//! instead, under the same load: the same crash restart, and the worker must come back (a
//! new process).
//! The server under test is a throwaway server (crash_server), the ledger lives on the
//! shared one. Every trial is checked against I1-I4 and I6.

use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::crash_server::{self, CrashServer, PURGE_WORKER};
use pg_idempotency_faults::history::Run;
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Progress};
use pg_idempotency_tests::{self as suite, Backend, Skip};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NAME: &str = "pgidem_faults_f4_kill_backend";
const LEASE: &str = "300 milliseconds";
const PROCESSES: usize = 6;
const CALLS: usize = 200;
/// Operations between two kills: at least this many, plus a random part of as many again.
const STRIDE: usize = 30;
/// Kills per trial at most.
const KILLS: usize = 5;

/// Which processes the killer aims at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aim {
    ClientBackends,
    PurgeWorker,
}

/// What the killer did in one trial.
#[derive(Debug, Default, Clone, Copy)]
struct Kills {
    /// Client task backends killed.
    clients: usize,
    /// Purge workers killed, and those seen back as a new process.
    workers: usize,
    workers_back: usize,
    /// Crash restarts seen through (a session of the killer broken, then a new one).
    restarts: usize,
}

/// A backend of the client tasks (any state), picked with `$3`; none when none is connected.
const CLIENT_BACKEND: &str = "\
    SELECT pids[(1 + $3::bigint % cardinality(pids))::int] \
    FROM (SELECT array_agg(pid ORDER BY pid) AS pids FROM pg_stat_activity \
          WHERE datname = $1 AND application_name = $2) s \
    WHERE cardinality(pids) > 0";

/// The purge worker, connected to the database it purges.
const WORKER: &str = "SELECT pid FROM pg_stat_activity WHERE backend_type = $1 AND datname = $2";

/// The purge worker's pid, polled for until it runs (it starts once recovery ended).
async fn worker_pid(c: &tokio_postgres::Client, db: &str, not: Option<i32>) -> Option<i32> {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let pid: Option<i32> = c
            .query_opt(WORKER, &[&PURGE_WORKER, &db])
            .await
            .unwrap_or_else(|e| panic!("looking for the purge worker: {e}"))
            .map(|r| r.get(0));
        if pid.is_some() && pid != not {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Kills backends until every task has ended or `KILLS` were made. Kills stop once half the
/// run's least number of operations was recorded, so that the run ends on a server that is
/// up again (the tasks need it up to record the other half).
async fn killer(server: Arc<CrashServer>, aim: Aim, progress: Progress, seed: u64) -> Kills {
    let dsn = format!("{} application_name=pgidem_faults_killer", server.dsn());
    let mut c = crash_server::connect_when_up(&dsn).await;
    let mut choices = Choices::new(seed);
    let mut kills = Kills::default();
    let last_kill_before = PROCESSES * CALLS / 2;
    for _ in 0..KILLS {
        let next = progress.now().events + STRIDE + choices.below(STRIDE);
        let pace = progress.reached(next).await;
        if pace.ended || pace.events >= last_kill_before {
            break;
        }
        if aim == Aim::PurgeWorker {
            let pid = worker_pid(&c, &server.db, None)
                .await
                .expect("the purge worker does not run");
            assert!(server.kill9(pid), "kill -9 of the purge worker {pid}");
            kills.workers += 1;
            c = crash_server::through_crash_recovery(c, &dsn).await;
            kills.restarts += 1;
            if worker_pid(&c, &server.db, Some(pid)).await.is_some() {
                kills.workers_back += 1;
            }
            continue;
        }
        let pick = choices.below(1 << 16) as i64;
        loop {
            if progress.now().ended {
                return kills;
            }
            let pid: Option<i32> = c
                .query_opt(CLIENT_BACKEND, &[&server.db, &run::APPLICATION, &pick])
                .await
                .unwrap_or_else(|e| panic!("the killer's statement: {e}"))
                .map(|r| r.get(0));
            // None: the tasks are connecting again; false: it ended on its own. Pick again.
            if pid.is_some_and(|pid| server.kill9(pid)) {
                break;
            }
        }
        kills.clients += 1;
        c = crash_server::through_crash_recovery(c, &dsn).await;
        kills.restarts += 1;
    }
    kills
}

/// The ledger of the test whose server-under-test database is `db`, on the shared server.
fn ledger_name(db: &str) -> String {
    format!("{db}_ledger")
}

/// One trial: a fresh scope on the server under test, a fresh ledger; the run, checked.
async fn trial(server: Arc<CrashServer>, aim: Aim, n: u64) -> (Run, Kills, Vec<Violation>) {
    let ledger = ledger_name(&server.db);
    let ledger_dsn = tokio::task::spawn_blocking(move || suite::fresh_database(&ledger))
        .await
        .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: PROCESSES,
        keys: 96,
        calls_per_process: CALLS,
        scope: suite::scope("f4"),
        lease: LEASE.into(),
        ttl: "1 hour".into(),
        seed: 400 + n,
    };
    let progress = Progress::default();
    let kills = tokio::spawn(killer(server.clone(), aim, progress.clone(), 4000 + n));
    let run = run::run(
        &server.dsn(),
        &ledger_dsn,
        w,
        run::Options::default()
            .progress(progress)
            .monitor(run::Monitor::watching_for_vanished_records()),
    )
    .await
    .unwrap_or_else(|e| panic!("trial {n}: {e}"));
    let kills = kills.await.unwrap();
    let violations = check::check(&run);
    (run, kills, violations)
}

/// Trials of the run with `aim`'s kills on a server of its own named `name`; every trial
/// checked; the tally, with the kills made, once written.
async fn trials(name: &'static str, aim: Aim, scenario: &str, count: usize) -> (Tally, Kills) {
    let db = format!("{NAME}_{name}");
    let server = tokio::task::spawn_blocking(move || CrashServer::start(name, &db))
        .await
        .unwrap();
    let server = Arc::new(server);
    let mut tally = Tally::new(scenario);
    let mut total = Kills::default();
    for n in 0..report::trials(count) {
        let started = Instant::now();
        let (run, kills, violations) = trial(server.clone(), aim, n as u64).await;
        tally.add(&run, kills.clients + kills.workers, &violations);
        total.clients += kills.clients;
        total.workers += kills.workers;
        total.workers_back += kills.workers_back;
        total.restarts += kills.restarts;
        eprintln!(
            "{name} trial {n}: {} operations, {} unknown, {kills:?}, {:?}",
            run.events.len(),
            run.events.iter().filter(|e| e.is_indeterminate()).count(),
            started.elapsed()
        );
        assert!(violations.is_empty(), "{name} trial {n}: {violations:#?}");
    }
    // Every kill was followed by a crash restart that broke the sessions.
    assert_eq!(
        total.restarts,
        total.clients + total.workers,
        "a kill without a crash restart: {total:?}"
    );
    tally.assert_unknown_outcomes();
    tally.close(&server.dsn(), &format!("{total:?}")).await;
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&ledger_name(&server.db));
        drop(server);
    })
    .await
    .unwrap();
    (tally, total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_client_backends_keep_the_invariants() {
    let (tally, kills) = trials("f4_clients", Aim::ClientBackends, "F4 backend killed", 4).await;
    assert!(kills.clients > 0, "no client backend was killed: {kills:?}");
    // Calls cut short by a crash were taken over once their lease lapsed.
    tally.assert_takeovers();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_purge_worker_comes_back() {
    if suite::backend() == Backend::Portable {
        suite::skip(
            Skip::NotApplicable,
            "the portable variant has no purge worker (its purge runs from pg_cron or by hand)",
        );
        return;
    }
    let (_, kills) = trials("f4_worker", Aim::PurgeWorker, "F4 purge worker killed", 2).await;
    assert!(kills.workers > 0, "the purge worker was never killed");
    assert_eq!(
        kills.workers_back, kills.workers,
        "the purge worker did not come back after a kill: {kills:?}"
    );
}
