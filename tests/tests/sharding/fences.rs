//! Fences stay unique across partitions: idem_proxy_configure gives partition p the range
//! [p * 2^44, (p + 1) * 2^44), so a fence names one claim anywhere, and a takeover on a
//! partition still gets a fence above its holder's.

use std::collections::HashSet;

use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

const RANGE: i64 = 1 << 44;

#[test]
fn each_partition_hands_out_fences_from_its_own_range() {
    let Some(s) = Sharded::new("fences", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("fences");
    let mut seen = HashSet::new();
    let mut per = [0usize; 4];
    for i in 0..80 {
        let key = format!("k{i}");
        let fence = begin(&mut c, &scope, &key).fence.unwrap();
        let p = s.partition_of(&scope, &key);
        assert!(
            (p as i64 * RANGE..(p as i64 + 1) * RANGE).contains(&fence),
            "partition {p} gave fence {fence}"
        );
        assert!(seen.insert(fence), "fence {fence} handed out twice");
        per[p] += 1;
    }
    assert!(
        per.iter().all(|&n| n > 0),
        "a partition got no key: {per:?}"
    );
    // Configuring again (after adding a partition, say) moves no range back.
    s.configure();
    for i in 80..100 {
        let key = format!("k{i}");
        let fence = begin(&mut c, &scope, &key).fence.unwrap();
        assert!(seen.insert(fence), "fence {fence} handed out twice");
        assert!(fence >= s.partition_of(&scope, &key) as i64 * RANGE);
    }
}

#[test]
fn configure_reports_each_partitions_range() {
    let Some(s) = Sharded::new("ranges", 2) else {
        return;
    };
    let conninfo: Vec<String> = s
        .partitions
        .iter()
        .map(|d| pg_idempotency_tests::sharded::partition_conninfo(d))
        .collect();
    let rows = s
        .connect()
        .query("SELECT * FROM idem_proxy_configure($1)", &[&conninfo])
        .unwrap();
    let ranges: Vec<(i32, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(ranges, vec![(0, 1, RANGE), (1, RANGE, 2 * RANGE)]);
}
