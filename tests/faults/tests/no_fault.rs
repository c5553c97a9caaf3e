//! The no-fault run: many client tasks racing on a few hot keys of a healthy server, checked
//! with the same invariants as every fault scenario (anomalies have been found that way).

use pg_idempotency_faults::{ledger, run};
use pg_idempotency_tests as suite;

/// A fresh database with the backend under test, and a fresh ledger database.
fn databases(name: &str) -> (String, String) {
    let server = suite::fresh_database(&format!("pgidem_faults_{name}"));
    suite::install(&server);
    let ledger = suite::fresh_database(&format!("pgidem_faults_{name}_ledger"));
    (server, ledger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_keys_through_plain_sql() {
    let (server, ledger_dsn) = tokio::task::spawn_blocking(|| databases("hot_sql"))
        .await
        .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: 8,
        keys: 4,
        calls_per_process: 60,
        scope: "hot".into(),
        lease: "30 seconds".into(),
        ttl: "1 hour".into(),
        seed: 12,
    };
    let run = run::plain_sql(&server, &ledger_dsn, w.clone())
        .await
        .unwrap();

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
        "one effect per key: {:?}",
        run.ledger
    );
    assert!(
        run.records.iter().all(|r| r.state == "succeeded"),
        "{:?}",
        run.records
    );
    let violations = pg_idempotency_faults::check::check(&run);
    assert!(violations.is_empty(), "{violations:#?}");
    tokio::task::spawn_blocking(|| {
        suite::drop_database("pgidem_faults_hot_sql");
        suite::drop_database("pgidem_faults_hot_sql_ledger");
    })
    .await
    .unwrap();
}
