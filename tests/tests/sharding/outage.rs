//! One partition down: the calls whose keys live there fail with PL/Proxy's error naming
//! the partition, every other key keeps working, and once the partition is back its keys
//! work again, its records intact.

use pg_idempotency_tests::sharded::{partition_of, plproxy_available, Sharded};
use pg_idempotency_tests::*;

/// A key of `scope` that routes to partition `p` of 2.
fn key_on(scope: &str, p: usize, from: usize) -> String {
    (from..)
        .map(|i| format!("k{i}"))
        .find(|k| partition_of(scope, k, 2) == p)
        .unwrap()
}

#[test]
fn only_the_down_partitions_keys_fail_and_they_work_again_when_it_returns() {
    if !plproxy_available() {
        return;
    }
    // Partition 0 on the server under test, partition 1 on a server of its own.
    let other = TempCluster::start("shard-outage", &[]);
    let db = "pgidem_outage_p1";
    connect_to(&other.dsn("postgres"))
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .unwrap();
    install_backend(&other.dsn(db), backend());
    let p0_db = format!("pgidem_outage_p0_{}", std::process::id());
    let p0 = fresh_database(&p0_db);
    install_backend(&p0, backend());
    let s = Sharded::in_front_of("outage", vec![p0, other.dsn(db)], vec![p0_db]);

    let scope = scope("outage");
    let (on0, on1) = (key_on(&scope, 0, 0), key_on(&scope, 1, 0));
    let mut c = s.connect();
    for key in [&on0, &on1] {
        let b = begin(&mut c, &scope, key);
        complete(&mut c, &scope, key, b.fence.unwrap(), r#"{"before": true}"#).unwrap();
    }

    other.stop_immediate();
    let down = try_begin(&mut c, &scope, &on1, None, None, None).unwrap_err();
    let text = down
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(
        text.contains(&format!("[{db}]")),
        "the error names the partition: {down}"
    );
    assert!(
        text.contains("connection"),
        "the error says the connection failed: {down}"
    );
    let new_on1 = key_on(&scope, 1, 1000);
    assert!(try_begin(&mut c, &scope, &new_on1, None, None, None).is_err());
    // The other partition's keys: replayed, and new ones claimed.
    assert_eq!(begin(&mut c, &scope, &on0).outcome, "replay");
    let new_on0 = key_on(&scope, 0, 1000);
    assert_eq!(begin(&mut c, &scope, &new_on0).outcome, "claimed");
    // A session opened during the outage too.
    let mut fresh = s.connect();
    assert_eq!(begin(&mut fresh, &scope, &on0).outcome, "replay");
    assert!(try_begin(&mut fresh, &scope, &on1, None, None, None).is_err());

    other.start_again();
    // PL/Proxy drops a connection it finds broken and opens a new one: the first call
    // after the partition is back already reaches it.
    let back = try_begin(&mut c, &scope, &on1, None, None, None)
        .unwrap_or_else(|e| panic!("partition 1 is back, yet: {e}"));
    assert_eq!(back.outcome, "replay");
    assert_eq!(back.response.as_deref(), Some(r#"{"before": true}"#));
    assert_eq!(begin(&mut c, &scope, &new_on1).outcome, "claimed");
    assert_eq!(begin(&mut fresh, &scope, &on1).outcome, "replay");
    drop((c, fresh));
    drop(s);
}
