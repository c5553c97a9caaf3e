//! `metrics`, an operator's call (tests/regress/sql/metrics.sql and counters.sql): per
//! scope, the live records by state, lapsed leases, expired records still stored, the
//! oldest running call, and how many `begin` calls answered each outcome.

use std::time::{Duration, SystemTime};

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

const SLACK: Duration = Duration::from_millis(5);

async fn row_of(h: &Harness, scope: &str) -> ScopeMetrics {
    let rows: Vec<ScopeMetrics> = h
        .metrics()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.scope == scope)
        .collect();
    assert_eq!(rows.len(), 1, "one row for {scope}: {rows:?}");
    rows.into_iter().next().unwrap()
}

pub async fn counts_records_and_outcomes(h: Harness) {
    let sc = h.scope("metrics");
    let n = |n: i32| BeginOptions {
        request: Some(json!({ "n": n })),
        ..opts()
    };
    // a: claimed, in_progress, mismatch, then three replays (every counter differs from
    // the others, so that no two can be mixed up).
    let a = claimed(h.begin(&sc, "a", &n(1)).await);
    running(h.begin(&sc, "a", &n(1)).await);
    refused(h.begin(&sc, "a", &n(2)).await, ErrorKind::Mismatch);
    h.complete(&sc, "a", a.fence, Some(&json!({})), true, None)
        .await
        .unwrap();
    for _ in 0..3 {
        replayed(h.begin(&sc, "a", &n(1)).await);
    }
    // b: a cached failure.
    let b = claimed(h.begin(&sc, "b", &opts()).await);
    h.complete(&sc, "b", b.fence, Some(&json!({})), false, Some(true))
        .await
        .unwrap();
    // c: its lease lapses; d: it expires (its lease is its ttl; its unresolved bound, which
    // keeps a lapsed claim past its ttl, is short too).
    let short = |lease: Option<u64>, ttl: Option<u64>| BeginOptions {
        lease: lease.map(Duration::from_millis),
        ttl: ttl.map(Duration::from_millis),
        unresolved_ttl: ttl.map(|_| Duration::from_millis(1)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, "c", &short(Some(100), None)).await);
    let d = claimed(h.begin(&sc, "d", &short(None, Some(100))).await);
    let mut deadline = Deadline::new("c lapsed and d expired", Duration::from_secs(5));
    while SystemTime::now() <= c.lease_until.max(d.expires_at)
        || h.lookup(&sc, "d").await.unwrap().is_some()
    {
        deadline.tick().await;
    }
    // e: running; a wait on it that runs out is one in_progress answer, however often the
    // store looked while waiting.
    claimed(h.begin(&sc, "e", &opts()).await);
    let waited = BeginOptions {
        wait: Duration::from_millis(300),
        ..opts()
    };
    running(h.begin(&sc, "e", &waited).await);
    // Not counted: a refused repeat, an invalid argument.
    let fail_fast = BeginOptions {
        on_cache_hit: Some(OnCacheHit::FailFast),
        ..n(1)
    };
    refused(
        h.begin(&sc, "a", &fail_fast).await,
        ErrorKind::RepeatRefused,
    );
    refused(h.begin(&sc, " ", &opts()).await, ErrorKind::InvalidArgument);
    // Another scope has its own row.
    let other = h.scope("metrics-other");
    claimed(h.begin(&other, "a", &opts()).await);

    let c_created = h.lookup(&sc, "c").await.unwrap().unwrap().created_at;
    let before = SystemTime::now();
    let row = row_of(&h, &sc).await;
    let after = SystemTime::now();
    let kept = h.kept(&sc, "d").await;

    assert_eq!(row.owner, h.owner().await);
    assert_eq!(
        (row.in_progress, row.succeeded, row.failed, row.lapsed),
        (2, 1, 1, 1),
        "c and e running (c lapsed), a succeeded, b failed: {row:?}"
    );
    match kept {
        // Still stored when metrics read it: counted as expired.
        Some(true) => assert_eq!(row.expired, 1, "{row:?}"),
        // Removed (Redis expires it; a purge may have run): gone since, or before.
        Some(false) => assert!(row.expired <= 1, "{row:?}"),
        // MemoryStore keeps it until purge.
        None => assert_eq!(row.expired, 1, "{row:?}"),
    }
    let oldest = row.oldest_in_progress.expect("an oldest running call");
    assert!(
        oldest + SLACK >= between(c_created, before) && oldest <= between(c_created, after) + SLACK,
        "the oldest running call is c: {oldest:?}"
    );
    // Every store counts its outcomes, however many scopes (0.8.0); the portable variant
    // does not count the mismatch it raised (its note says so).
    let mut want = OutcomeCounts {
        claimed: 5,
        replay: 3,
        in_progress: 2,
        mismatch: u64::from(h.counts_raised_refusals()),
    };
    // Through PL/Proxy or a pooler in transaction mode, the extension's backend that raised
    // the mismatch writes its count with its own next call (docs/scaling.md), which may not
    // have come yet (the next calls went to other backends): counted then, so 0 or 1 here.
    let through = |layer: &str| std::env::var(layer).as_deref() == Ok("1");
    let shared_backends = through("PGIDEM_THROUGH_PROXY") || through("PGIDEM_THROUGH_POOLER");
    if shared_backends && h.counts_raised_refusals() {
        let seen = row.outcomes.map_or(0, |o| o.mismatch);
        assert!(seen <= 1, "{row:?}");
        want.mismatch = seen;
    }
    assert_eq!(row.outcomes, Some(want), "{row:?}");
    if h.counts_raised_refusals() {
        assert_eq!(row.note, None);
    } else {
        assert!(
            row.note
                .as_deref()
                .is_some_and(|n| n.contains("not counted")),
            "{row:?}"
        );
    }

    let o = row_of(&h, &other).await;
    assert_eq!((o.in_progress, o.succeeded, o.lapsed), (1, 0, 0), "{o:?}");
    assert_eq!(o.outcomes.map(|c| c.claimed), Some(1));

    // Purged, the expired record is counted no more; forgotten, a running one neither.
    h.purge().await.unwrap();
    assert!(h.forget(&sc, "e").await.unwrap());
    let row = row_of(&h, &sc).await;
    assert_eq!((row.expired, row.in_progress), (0, 1), "{row:?}");
}
