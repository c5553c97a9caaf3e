//! Does a call get slower as the table grows? `idem_begin` latency (new keys, and replays of
//! random stored keys) with a small table, then again once it holds many rows. Keys are
//! hex digests, so new keys land all over the key index, as real keys do.

use std::sync::Arc;
use std::time::Instant;

use crate::harness::{connect, fresh_key, measure, prepared, BenchResult, Op, Plan, Stats};

pub struct GrowthReport {
    pub small_rows: i64,
    pub large_rows: i64,
    pub load_seconds: f64,
    pub claim_small: Stats,
    pub claim_large: Stats,
    pub replay_small: Stats,
    pub replay_large: Stats,
    pub table_bytes: i64,
}

/// Adds completed records `from..to` (keys md5 of the number) in batches of a million.
async fn load(dsn: &str, from: i64, to: i64) -> BenchResult<()> {
    let c = connect(dsn).await?;
    let mut start = from;
    while start < to {
        let end = (start + 1_000_000).min(to);
        c.execute(
            "INSERT INTO idempotency.records (scope, key, state, fence, attempt, upstream_key, \
                 response, created_at, completed_at, expires_at, ttl, owner) \
             SELECT 'grow', md5(g::text), 'succeeded', nextval('idempotency.fence_seq'), 1, \
                 gen_random_uuid(), '{\"ok\": true}', now(), now(), now() + interval '1 day', \
                 interval '1 day', current_user::regrole \
             FROM generate_series($1::bigint, $2::bigint - 1) g",
            &[&start, &end],
        )
        .await?;
        start = end;
    }
    c.batch_execute("VACUUM ANALYZE idempotency.records")
        .await?;
    Ok(())
}

fn claim() -> Op {
    Arc::new(|client, _| {
        Box::pin(async move {
            let key = format!("{:x}", md5ish(&fresh_key("grow-new")));
            let s = prepared(&client, "SELECT fence FROM idem_begin('grow', $1)").await?;
            client.query_one(&s, &[&key]).await?;
            Ok(())
        })
    })
}

fn replay(rows: i64) -> Op {
    Arc::new(move |client, n| {
        Box::pin(async move {
            // A stored key picked all over the table: md5 of a number below `rows`.
            let pick = (n.wrapping_mul(2_654_435_761) % rows as u64) as i64;
            let s = prepared(
                &client,
                "SELECT outcome FROM idem_begin('grow', md5($1::bigint::text))",
            )
            .await?;
            client.query_one(&s, &[&pick]).await?;
            Ok(())
        })
    })
}

/// A cheap 128-bit scramble of a string (spreads new keys like digests do).
fn md5ish(s: &str) -> u128 {
    let mut h: u128 = 0x6c62272e07bb014262b821756295c58d;
    for b in s.bytes() {
        h ^= b as u128;
        h = h.wrapping_mul(0x0000000001000000000000000000013b);
    }
    h
}

pub async fn run(dsn: &str, plan: Plan, small: i64, large: i64) -> BenchResult<GrowthReport> {
    let c = connect(dsn).await?;
    c.batch_execute("TRUNCATE idempotency.records").await?;
    load(dsn, 0, small).await?;
    let claim_small = measure(dsn, plan, claim()).await?;
    let replay_small = measure(dsn, plan, replay(small)).await?;
    let t = Instant::now();
    load(dsn, small, large).await?;
    let load_seconds = t.elapsed().as_secs_f64();
    let claim_large = measure(dsn, plan, claim()).await?;
    let replay_large = measure(dsn, plan, replay(large)).await?;
    let table_bytes: i64 = c
        .query_one("SELECT pg_total_relation_size('idempotency.records')", &[])
        .await?
        .get(0);
    // Give the space back.
    c.batch_execute("TRUNCATE idempotency.records").await?;
    Ok(GrowthReport {
        small_rows: small,
        large_rows: large,
        load_seconds,
        claim_small,
        claim_large,
        replay_small,
        replay_large,
        table_bytes,
    })
}
