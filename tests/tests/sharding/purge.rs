//! Purging and metrics through the proxy ask every partition: one idem_purge_expired() on
//! the proxy (what pg_cron or the purge worker would run there) purges them all.

use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

#[test]
fn purge_through_the_proxy_removes_the_expired_records_of_every_partition() {
    let Some(s) = Sharded::new("purge", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("purge");
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    for key in &keys {
        let fence: i64 = c
            .query_one(
                "SELECT fence FROM idem_begin($1, $2, ttl => '1 s')",
                &[&scope, key],
            )
            .unwrap()
            .get(0);
        complete(&mut c, &scope, key, fence, "{}").unwrap();
    }
    let live = begin(&mut c, &scope, "live");
    let spread: Vec<usize> = (0..4)
        .filter(|&p| keys.iter().any(|k| s.partition_of(&scope, k) == p))
        .collect();
    assert_eq!(spread, vec![0, 1, 2, 3], "the keys cover every partition");
    wait_for_expiry(&mut c, &scope, &keys);
    let purged: i64 = c
        .query_one("SELECT idem_purge_expired()", &[])
        .unwrap()
        .get(0);
    assert_eq!(purged, keys.len() as i64);
    for p in 0..4 {
        let left: i64 = s
            .partition(p)
            .query_one(
                "SELECT count(*) FROM idempotency.records WHERE scope = $1",
                &[&scope],
            )
            .unwrap()
            .get(0);
        let expected = (s.partition_of(&scope, "live") == p) as i64;
        assert_eq!(left, expected, "partition {p}");
    }
    let again: i64 = c
        .query_one("SELECT idem_purge_expired(10)", &[])
        .unwrap()
        .get(0);
    assert_eq!(again, 0);
    complete(&mut c, &scope, "live", live.fence.unwrap(), "{}").unwrap();
}

#[test]
fn metrics_through_the_proxy_add_up_every_partition() {
    let Some(s) = Sharded::new("metrics", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("metrics");
    for i in 0..30 {
        let key = format!("k{i}");
        let b = begin(&mut c, &scope, &key);
        if i % 3 != 0 {
            complete(&mut c, &scope, &key, b.fence.unwrap(), "{}").unwrap();
        }
    }
    let rows = c
        .query(
            "SELECT owner::text, in_progress, succeeded, failed FROM idem_metrics() WHERE scope = $1",
            &[&scope],
        )
        .unwrap();
    assert_eq!(
        rows.len(),
        1,
        "one row per owner and scope, not one per partition"
    );
    let r = &rows[0];
    assert_eq!(r.get::<_, String>(0), "postgres");
    assert_eq!(r.get::<_, i64>(1), 10);
    assert_eq!(r.get::<_, i64>(2), 20);
    assert_eq!(r.get::<_, i64>(3), 0);
}

#[test]
fn a_policy_set_through_the_proxy_reaches_every_partition() {
    let Some(s) = Sharded::new("policy", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("policy");
    let ttl: String = c
        .query_one(
            "SELECT ttl::text FROM idem_set_policy($1, ttl => '2 hours')",
            &[&scope],
        )
        .unwrap()
        .get(0);
    assert_eq!(ttl, "02:00:00");
    for p in 0..2 {
        let n: i64 = s
            .partition(p)
            .query_one(
                "SELECT count(*) FROM idem_policies() WHERE scope = $1",
                &[&scope],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "partition {p}");
    }
    let listed: i64 = c
        .query_one(
            "SELECT count(*) FROM idem_policies() WHERE scope = $1",
            &[&scope],
        )
        .unwrap()
        .get(0);
    assert_eq!(listed, 1, "listed once, not once per partition");
    let dropped: bool = c
        .query_one("SELECT idem_drop_policy($1)", &[&scope])
        .unwrap()
        .get(0);
    assert!(dropped);
    let gone: bool = c
        .query_one("SELECT idem_drop_policy($1)", &[&scope])
        .unwrap()
        .get(0);
    assert!(!gone);
}
