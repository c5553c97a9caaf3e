//! The no-fault runs: many client tasks racing on hot keys of a healthy server, checked with
//! the same invariants as every fault scenario (anomalies have been found that way). With a
//! long lease every call is claimed once; with a lease shorter than a call, holders are
//! taken over while they are still making their effect or completing, and the takeovers
//! race with their completions.

use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::history::Run;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::{ledger, run};
use pg_idempotency_tests as suite;

/// A fresh database with the backend under test, and a fresh ledger database.
fn databases(name: &str) -> (String, String) {
    let server = suite::fresh_database(&format!("pgidem_faults_{name}"));
    suite::install(&server);
    let ledger = suite::fresh_database(&format!("pgidem_faults_{name}_ledger"));
    (server, ledger)
}

/// One trial of `w` on fresh databases named after `name`: the run and what the checker
/// found in it.
async fn trial(name: &'static str, w: run::Workload) -> (Run, Vec<Violation>) {
    let (server, ledger_dsn) = tokio::task::spawn_blocking(move || databases(name))
        .await
        .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let run = run::run(&server, &ledger_dsn, w, run::Options::default())
        .await
        .unwrap();
    let violations = check::check(&run);
    (run, violations)
}

/// Closes the tally and drops the databases of `name`.
async fn finish(name: &'static str, tally: &Tally) {
    tally.close(&suite::dsn(), "").await;
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&format!("pgidem_faults_{name}"));
        suite::drop_database(&format!("pgidem_faults_{name}_ledger"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_keys_through_plain_sql() {
    let mut tally = Tally::new("no-fault");
    for n in 0..report::trials(2) {
        let w = run::Workload {
            processes: 8,
            keys: 4,
            calls_per_process: 60,
            scope: "hot".into(),
            lease: "30 seconds".into(),
            ttl: "1 hour".into(),
            seed: 12 + n as u64,
        };
        let (run, violations) = trial("hot_sql", w).await;
        tally.add(&run, 0, &violations);

        // Every key was called, claimed once, its effect made once, and completed.
        assert_eq!(
            run.events.iter().filter(|e| e.is_indeterminate()).count(),
            0
        );
        let mut keys: Vec<&str> = run.ledger.iter().map(|r| r.key.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            ["k0", "k1", "k2", "k3"],
            "trial {n}, one effect per key: {:?}",
            run.ledger
        );
        assert!(
            run.records.iter().all(|r| r.state == "succeeded"),
            "trial {n}: {:?}",
            run.records
        );
        assert!(violations.is_empty(), "trial {n}: {violations:#?}");
    }
    finish("hot_sql", &tally).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn takeovers_race_completions_under_a_short_lease() {
    let mut tally = Tally::new("no-fault");
    for n in 0..report::trials(2) {
        // A 5 ms lease is shorter than many calls (a claim, an effect in another database,
        // a completion, with eight tasks on the machine's cores): holders are taken over
        // while they still work, and completions race with the takeovers. Many keys, so
        // that fresh calls keep coming through the run.
        let w = run::Workload {
            processes: 8,
            keys: 32,
            calls_per_process: 60,
            scope: "hot".into(),
            lease: "5 milliseconds".into(),
            ttl: "1 hour".into(),
            seed: 50 + n as u64,
        };
        let (run, violations) = trial("hot_short_lease", w).await;
        tally.add(&run, 0, &violations);
        assert_eq!(
            run.events.iter().filter(|e| e.is_indeterminate()).count(),
            0,
            "trial {n}: no fault, no unknown outcome"
        );
        assert!(violations.is_empty(), "trial {n}: {violations:#?}");
    }
    // The run did what it is for: calls were taken over from live holders.
    tally.assert_takeovers();
    finish("hot_short_lease", &tally).await;
}
