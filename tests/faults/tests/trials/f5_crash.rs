//! F5, the server crashes: while client tasks race on a few keys through plain SQL (lease
//! 300 ms), the server under test is stopped with `pg_ctl stop -m immediate` (every process
//! ends at once, nothing is checkpointed: what was not flushed to the WAL is gone, as after
//! a power cut of the server's memory) and started again (crash recovery); the tasks see
//! their connections break (unknown outcomes), connect again and go on. A claim or a
//! completion the product acknowledged must survive the crash: the checker's I2 (an
//! acknowledged completion is read back), I3 (no fence handed out twice, fences increase)
//! and I4 (no new life while an acknowledged one may hold the key) see a lost one.
//!
//! Two modes, trials alternating: sessions with the server's `synchronous_commit = on`, and
//! sessions that set `synchronous_commit = off` (the product must still commit its own
//! calls synchronously: DESIGN.md 7, Durability). The server under test is a throwaway
//! server (crash_server), the ledger lives on the shared one.

use std::sync::Arc;
use std::time::Instant;

use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::crash_server::{self, CrashServer};
use pg_idempotency_faults::history::Run;
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Progress};
use pg_idempotency_tests as suite;

const NAME: &str = "pgidem_faults_f5_crash";
const LEASE: &str = "300 milliseconds";
const PROCESSES: usize = 6;
const CALLS: usize = 200;
/// Operations between two crashes: at least this many, plus a random part of as many again.
const STRIDE: usize = 60;
/// Crashes per trial at most.
const CRASHES: usize = 3;

/// How the client tasks' sessions commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sessions {
    /// The server's default, `synchronous_commit = on`.
    Synchronous,
    /// Each session sets `synchronous_commit = off` (a startup option: the same session
    /// setting as a `SET` right after connecting).
    Asynchronous,
}

impl Sessions {
    /// The DSN the client tasks connect with.
    fn dsn(self, server: &str) -> String {
        match self {
            Sessions::Synchronous => server.to_string(),
            Sessions::Asynchronous => format!("{server} options='-c synchronous_commit=off'"),
        }
    }
}

/// Crashes the server and starts it again, until every task has ended or `CRASHES` were
/// made. Crashes stop once half the run's least number of operations was recorded, so that
/// the run ends on a server that is up again (the tasks need it up to record the rest).
async fn crasher(server: Arc<CrashServer>, progress: Progress, seed: u64) -> usize {
    let mut choices = Choices::new(seed);
    let last_crash_before = PROCESSES * CALLS / 2;
    let mut crashes = 0;
    for _ in 0..CRASHES {
        let next = progress.now().events + STRIDE + choices.below(STRIDE);
        let pace = progress.reached(next).await;
        if pace.ended || pace.events >= last_crash_before {
            break;
        }
        let s = server.clone();
        tokio::task::spawn_blocking(move || {
            let before = s.cluster.postmaster_pid();
            s.cluster.stop_immediate();
            assert!(
                before.is_some(),
                "the server was not running before the crash"
            );
            assert_eq!(
                s.cluster.postmaster_pid(),
                None,
                "still running after the crash"
            );
            s.cluster.start_again();
        })
        .await
        .unwrap();
        crashes += 1;
    }
    crashes
}

/// One trial: a fresh scope on the server under test, a fresh ledger; the run, checked.
async fn trial(
    server: Arc<CrashServer>,
    sessions: Sessions,
    n: u64,
) -> (Run, usize, Vec<Violation>) {
    let ledger_dsn =
        tokio::task::spawn_blocking(|| suite::fresh_database(&format!("{NAME}_ledger")))
            .await
            .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: PROCESSES,
        keys: 96,
        calls_per_process: CALLS,
        scope: suite::scope("f5"),
        lease: LEASE.into(),
        ttl: "1 hour".into(),
        seed: 500 + n,
    };
    let progress = Progress::default();
    let crashes = tokio::spawn(crasher(server.clone(), progress.clone(), 5000 + n));
    let run = run::run(
        &sessions.dsn(&server.dsn()),
        &ledger_dsn,
        w,
        run::Options::default()
            .progress(progress)
            .monitor(run::Monitor::watching_for_vanished_records()),
    )
    .await
    .unwrap_or_else(|e| panic!("trial {n} ({sessions:?}): {e}"));
    let crashes = crashes.await.unwrap();
    let violations = check::check(&run);
    (run, crashes, violations)
}

/// The `synchronous_commit` of a session connected as the tasks of `sessions` connect.
async fn session_setting(server: &CrashServer, sessions: Sessions) -> String {
    let c = crash_server::connect_when_up(&sessions.dsn(&server.dsn())).await;
    c.query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_calls_survive_a_crash() {
    let server = tokio::task::spawn_blocking(|| CrashServer::start("f5", NAME))
        .await
        .unwrap();
    let server = Arc::new(server);
    // The two modes are what they say.
    assert_eq!(session_setting(&server, Sessions::Synchronous).await, "on");
    assert_eq!(
        session_setting(&server, Sessions::Asynchronous).await,
        "off"
    );

    let mut tally = Tally::new("F5 crash");
    let mut crashed = [0usize; 2];
    for n in 0..report::trials(4) {
        let sessions = [Sessions::Synchronous, Sessions::Asynchronous][n % 2];
        let started = Instant::now();
        let (run, crashes, violations) = trial(server.clone(), sessions, n as u64).await;
        tally.add(&run, crashes, &violations);
        crashed[n % 2] += crashes;
        eprintln!(
            "trial {n} ({sessions:?}): {} operations, {} unknown, {crashes} crashes, {:?}",
            run.events.len(),
            run.events.iter().filter(|e| e.is_indeterminate()).count(),
            started.elapsed()
        );
        assert!(
            violations.is_empty(),
            "trial {n} ({sessions:?}): {violations:#?}"
        );
    }
    // The server crashed in both modes, the tasks saw it (unknown outcomes), and calls whose
    // holder was cut off were taken over.
    assert!(
        crashed.iter().all(|&c| c > 0),
        "no crash in one of the modes (on, off): {crashed:?}"
    );
    tally.assert_unknown_outcomes();
    tally.assert_takeovers();
    tally
        .close(&server.dsn(), &format!("crashes (on, off): {crashed:?}"))
        .await;
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&format!("{NAME}_ledger"));
        drop(server);
    })
    .await
    .unwrap();
}
