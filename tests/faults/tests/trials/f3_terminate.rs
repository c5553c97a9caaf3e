//! F3, backends terminated: while six client tasks race on 32 keys through plain SQL
//! (lease 300 ms, so that the calls of a terminated holder are taken over during the run),
//! a killer on a superuser session of its own keeps picking one of the tasks' sessions and
//! ends it with `pg_terminate_backend`: mostly sessions that are running a statement (the
//! kill lands inside `idem_begin` or `idem_complete`), sometimes idle ones (the holder is
//! between its claim and its completion, or between calls). It paces itself on the run's
//! progress (a random number of operations between kills), not on time. A statement whose
//! backend is ended under it fails with 57P01 (a definite failure: the transaction did not
//! commit); the next statement on a session ended while idle finds the connection closed
//! (an unknown outcome); the tasks connect again and go on. Every trial, on fresh
//! databases, is checked against I1-I4 and I6.

use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::history::{Outcome, Run};
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Progress};
use pg_idempotency_tests as suite;

const NAME: &str = "pgidem_faults_f3_terminate";
const LEASE: &str = "300 milliseconds";
/// At most this many operations between two kills (at least one).
const STRIDE: usize = 12;
/// Of four kills, one is aimed at an idle session, three at a running statement.
const IDLE_ONE_IN: usize = 4;

fn databases() -> (String, String) {
    let server = suite::fresh_database(NAME);
    suite::install(&server);
    let ledger = suite::fresh_database(&format!("{NAME}_ledger"));
    (server, ledger)
}

/// Ends the client task session at position `$4` (modulo their number) among those of
/// database `$1` named `$2` whose state is in `$3`, in one statement so that the session
/// seen running is signalled while it still is. No row when there is none; false when it
/// ended on its own in between.
const TERMINATE_ONE: &str = "\
    SELECT pg_terminate_backend(pids[(1 + $4::bigint % cardinality(pids))::int]) \
    FROM (SELECT array_agg(pid ORDER BY pid) AS pids FROM pg_stat_activity \
          WHERE datname = $1 AND application_name = $2 AND state = ANY($3)) s \
    WHERE cardinality(pids) > 0";

/// What the killer did in one trial.
#[derive(Debug, Default, Clone, Copy)]
struct Kills {
    /// Sessions really terminated (pg_terminate_backend returned true), by the state they
    /// were picked in.
    active: usize,
    idle: usize,
}

/// Terminates the client tasks' sessions until every task has ended.
async fn killer(server: String, progress: Progress, seed: u64) -> Kills {
    let c = ledger::connect(&format!("{server} application_name=pgidem_faults_killer"))
        .await
        .unwrap_or_else(|e| panic!("the killer cannot connect: {e}"));
    let mut choices = Choices::new(seed);
    let mut kills = Kills::default();
    loop {
        let next = progress.now().events + 1 + choices.below(STRIDE);
        if progress.reached(next).await.ended {
            return kills;
        }
        let idle = choices.below(IDLE_ONE_IN) == 0;
        let states: Vec<String> = if idle {
            vec!["idle".into()]
        } else {
            vec!["active".into()]
        };
        let pick = choices.below(1 << 16) as i64;
        // Polls until a session in that state was found (the tasks are between statements
        // or connecting again), or the run ends.
        loop {
            if progress.now().ended {
                return kills;
            }
            let row = c
                .query_opt(TERMINATE_ONE, &[&NAME, &run::APPLICATION, &states, &pick])
                .await
                .unwrap_or_else(|e| panic!("the killer's statement: {e}"));
            match row.map(|r| r.get::<_, bool>(0)) {
                Some(true) if idle => kills.idle += 1,
                Some(true) => kills.active += 1,
                // Found, but it ended on its own before the signal: pick again.
                Some(false) | None => continue,
            }
            break;
        }
    }
}

/// One trial on fresh databases: the run, checked, and what the killer did.
async fn trial(n: u64) -> (Run, Kills, Vec<Violation>) {
    let (server, ledger_dsn) = tokio::task::spawn_blocking(databases).await.unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: 6,
        keys: 32,
        calls_per_process: 400,
        scope: suite::scope("f3"),
        lease: LEASE.into(),
        ttl: "1 hour".into(),
        seed: 300 + n,
    };
    let progress = Progress::default();
    let kills = tokio::spawn(killer(server.clone(), progress.clone(), 3000 + n));
    let run = run::run(
        &server,
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

/// How many operations of the run were answered as `matches` says.
fn count(run: &Run, matches: impl Fn(&Outcome) -> bool) -> usize {
    run.events.iter().filter(|e| matches(&e.outcome)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn terminated_backends_keep_the_invariants() {
    let mut tally = Tally::new("F3 terminated backends");
    let mut ended_in_statement = 0;
    for n in 0..report::trials(4) {
        let started = std::time::Instant::now();
        let (run, kills, violations) = trial(n as u64).await;
        tally.add(&run, kills.active + kills.idle, &violations);
        let ended = count(
            &run,
            |o| matches!(o, Outcome::Failed { sqlstate } if sqlstate == "57P01"),
        );
        let taken = report::takeovers(&run);
        ended_in_statement += ended;
        eprintln!(
            "trial {n}: {} operations, {} unknown, {ended} ended by 57P01, {taken} taken over; \
             {kills:?}; {:?}",
            run.events.len(),
            count(&run, |o| matches!(o, Outcome::Indeterminate { .. })),
            started.elapsed()
        );
        assert!(violations.is_empty(), "trial {n}: {violations:#?}");
    }
    // The fault fired and reached the clients both ways: statements ended under them
    // (57P01) and operations whose outcome they could not know.
    assert!(tally.faults > 0, "no session was terminated: {tally:?}");
    assert!(ended_in_statement > 0, "no statement was ended by a kill");
    tally.assert_unknown_outcomes();
    // Holders were ended mid-call and their calls taken over once their lease lapsed.
    tally.assert_takeovers();
    tally.close(&suite::dsn(), "").await;
    tokio::task::spawn_blocking(|| {
        suite::drop_database(NAME);
        suite::drop_database(&format!("{NAME}_ledger"));
    })
    .await
    .unwrap();
}
