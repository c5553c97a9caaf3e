//! Keys spread over every partition by the documented routing hash, which any client can
//! compute (docs/scaling.md): the first four bytes of SHA-256(scope, NUL, key).

use pg_idempotency_tests::sharded::{partition_of, routing_hash, Sharded};
use pg_idempotency_tests::*;

#[test]
fn the_routing_hash_is_pinned() {
    // Fixed values (computed apart, with Python's hashlib): a change of the formula would
    // move records to other partitions.
    let known = [
        ("send_email", "call-42", -450_655_530),
        ("charge_card", "order-7", -288_058_529),
        ("", "", 1_848_904_604),
        ("ü/ß", "日本", -1_440_901_323),
    ];
    for (scope, key, hash) in known {
        assert_eq!(routing_hash(scope, key), hash, "({scope:?}, {key:?})");
    }
    // The separator keeps apart what concatenation would not.
    assert_ne!(routing_hash("ab", "c"), routing_hash("a", "bc"));
}

#[test]
fn the_proxy_computes_the_documented_hash() {
    let Some(s) = Sharded::new("hash", 2) else {
        return;
    };
    let mut c = s.connect();
    for (scope, key) in [("send_email", "call-42"), ("ü/ß", "日本"), ("s", "k'\"\\")] {
        let h: i32 = c
            .query_one(
                "SELECT idempotency._idem_partition($1, $2)",
                &[&scope, &key],
            )
            .unwrap()
            .get(0);
        assert_eq!(h, routing_hash(scope, key), "({scope:?}, {key:?})");
    }
}

#[test]
fn keys_spread_over_every_partition_where_the_hash_names() {
    let Some(s) = Sharded::new("spread", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("spread");
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for key in &keys {
        let b = begin(&mut c, &scope, key);
        complete(&mut c, &scope, key, b.fence.unwrap(), "{}").unwrap();
    }
    let mut per = [0usize; 4];
    for key in &keys {
        per[partition_of(&scope, key, 4)] += 1;
    }
    for (p, expected) in per.iter().enumerate() {
        let stored: i64 = s
            .partition(p)
            .query_one(
                "SELECT count(*) FROM idempotency.records WHERE scope = $1 AND key = ANY($2)",
                &[&scope, &keys],
            )
            .unwrap()
            .get(0);
        assert_eq!(stored as usize, *expected, "partition {p}");
        // 200 keys over 4 partitions: each gets a share (binomial; below 20 is 1e-10 likely).
        assert!(stored >= 20, "partition {p} holds {stored} of 200 keys");
    }
    for key in keys.iter().take(20) {
        assert_eq!(
            s.holders(&scope, key),
            vec![s.partition_of(&scope, key)],
            "{key}"
        );
    }
}
