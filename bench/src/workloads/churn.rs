//! Storage under churn: calls are claimed, completed, expire and are purged, for many ttl
//! cycles, while the table's size (heap, TOAST and index) is sampled. The figure is the
//! largest size in the second half of the run against the size of the live records alone,
//! copied into a fresh table with the same settings.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::connect;

pub struct Churn {
    pub ttl: Duration,
    pub cycles: u32,
    pub writers: usize,
    pub purge_every: Duration,
}

pub struct ChurnReport {
    pub calls: u64,
    pub seconds: f64,
    pub live_rows: i64,
    pub live_bytes: i64,
    pub max_bytes: i64,
    pub end_bytes: i64,
    pub dead_tuples_end: i64,
    pub hot_updates: i64,
    pub updates: i64,
}

impl ChurnReport {
    pub fn ratio(&self) -> f64 {
        if self.live_bytes > 0 {
            self.max_bytes as f64 / self.live_bytes as f64
        } else {
            0.0
        }
    }
}

const SIZE: &str = "SELECT pg_total_relation_size('idempotency.records')";

pub async fn run(dsn: &str, plan: Churn) -> Result<ChurnReport, tokio_postgres::Error> {
    let admin = connect(dsn).await?;
    admin
        .batch_execute("TRUNCATE idempotency.records; SELECT pg_stat_reset()")
        .await?;
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let ttl = format!("{} seconds", plan.ttl.as_secs_f64());
    let mut tasks = Vec::new();
    for w in 0..plan.writers {
        let (stop, calls, ttl) = (stop.clone(), calls.clone(), ttl.clone());
        let c = connect(dsn).await?;
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}-{n}");
                let row = c
                    .query_one(
                        "SELECT fence FROM idem_begin('churn', $1, ttl => $2::text::interval)",
                        &[&key, &ttl],
                    )
                    .await?;
                let fence: i64 = row.get(0);
                c.execute(
                    "SELECT idem_complete('churn', $1, $2, jsonb_build_object('sent', $3::text))",
                    &[&key, &fence, &key],
                )
                .await?;
                calls.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    let purger = {
        let stop = stop.clone();
        let c = connect(dsn).await?;
        let every = plan.purge_every;
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                c.execute("SELECT idem_purge_expired()", &[]).await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        })
    };
    let start = Instant::now();
    let total = plan.ttl * plan.cycles;
    let mut max_bytes = 0i64;
    while start.elapsed() < total {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let bytes: i64 = admin.query_one(SIZE, &[]).await?.get(0);
        // The first half fills the table up to its steady state.
        if start.elapsed() > total / 2 {
            max_bytes = max_bytes.max(bytes);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer panicked")?;
    }
    purger.await.expect("purger panicked")?;
    let seconds = start.elapsed().as_secs_f64();
    let end_bytes: i64 = admin.query_one(SIZE, &[]).await?.get(0);
    let stats = admin
        .query_one(
            "SELECT n_dead_tup, n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables \
             WHERE schemaname = 'idempotency' AND relname = 'records'",
            &[],
        )
        .await?;
    admin
        .batch_execute(
            "DROP TABLE IF EXISTS churn_live; \
             CREATE TABLE churn_live (LIKE idempotency.records INCLUDING ALL) WITH (fillfactor = 80); \
             INSERT INTO churn_live SELECT * FROM idempotency.records WHERE expires_at > clock_timestamp()",
        )
        .await?;
    let live = admin
        .query_one(
            "SELECT count(*), pg_total_relation_size('churn_live') FROM churn_live",
            &[],
        )
        .await?;
    admin.batch_execute("DROP TABLE churn_live").await?;
    Ok(ChurnReport {
        calls: calls.load(Ordering::Relaxed),
        seconds,
        live_rows: live.get(0),
        live_bytes: live.get(1),
        max_bytes,
        end_bytes,
        dead_tuples_end: stats.get(0),
        hot_updates: stats.get(1),
        updates: stats.get(2),
    })
}
