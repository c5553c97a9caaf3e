//! The Rust rows of the peers workload, run in the bench's own process: the client crate's
//! `PgStore` and `RedisStore`, and the naive pattern on tokio-postgres. They run the same
//! cases as the drivers in bench/peers/ (cases.rs), through the same delay forwarder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_idempotency_client::{Begin, BeginOptions, IdempotencyStore, PgStore, RedisStore};
use serde_json::json;
use tokio_postgres::Client;

use super::cases::{fresh, Case, Measured, Target, REPLAY_KEYS};
use super::systems::RustKind;
use crate::harness::{connect, prepared, BenchResult};
use crate::workloads::calls::{FLOOR_INSERT as NAIVE_INSERT, FLOOR_SELECT, FLOOR_UPDATE};

/// The function under idempotency: a no-op that counts its executions, and fails for a key
/// made to fail.
#[derive(Default)]
struct Body {
    executions: AtomicU64,
}

impl Body {
    fn run(&self, key: &str) -> Result<serde_json::Value, String> {
        self.executions.fetch_add(1, Ordering::SeqCst);
        if key.starts_with("fail-") {
            Err(format!("{key} failed"))
        } else {
            Ok(json!({"ok": true}))
        }
    }

    fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }
}

/// A row's caller: a store of the client crate, or the naive statements on one connection
/// per concurrent caller.
enum Caller {
    Store(Arc<dyn IdempotencyStore>),
    Naive(Vec<Arc<Client>>),
}

const SCOPE: &str = "bench_rust";

impl Caller {
    async fn connect(kind: RustKind, target: &Target, width: usize) -> BenchResult<Caller> {
        Ok(match kind {
            RustKind::PgStore => {
                let config: tokio_postgres::Config = target.pg_dsn().parse()?;
                let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
                let pool = deadpool_postgres::Pool::builder(manager)
                    .max_size(width)
                    .build()?;
                // Every connection made before anything is timed.
                let mut held = Vec::new();
                for _ in 0..width {
                    held.push(pool.get().await?);
                }
                drop(held);
                Caller::Store(Arc::new(PgStore::new(pool)))
            }
            RustKind::RedisStore => {
                // One multiplexed connection for every task: the redis crate's way.
                let client =
                    redis::Client::open(format!("redis://{}:{}/", target.host, target.port))?;
                let store =
                    RedisStore::connect(client, redis::AsyncConnectionConfig::new(), "bench:")
                        .await?;
                Caller::Store(Arc::new(store))
            }
            RustKind::Naive => {
                let mut clients = Vec::new();
                for _ in 0..width {
                    clients.push(connect(&target.pg_dsn()).await?);
                }
                Caller::Naive(clients)
            }
        })
    }

    async fn call(&self, key: &str, slot: usize, body: &Body) -> BenchResult<&'static str> {
        match self {
            Caller::Store(store) => {
                match store.begin(SCOPE, key, &BeginOptions::default()).await? {
                    Begin::Claimed(claim) => match body.run(key) {
                        Ok(result) => {
                            store
                                .complete(SCOPE, key, claim.fence, Some(&result), true, None)
                                .await?;
                            Ok("ok")
                        }
                        Err(e) => {
                            let error = json!({ "error": e });
                            store
                                .complete(SCOPE, key, claim.fence, Some(&error), false, Some(true))
                                .await?;
                            Ok("failed")
                        }
                    },
                    Begin::Replay(r) if r.succeeded => Ok("replay"),
                    Begin::Replay(_) => Ok("failed"),
                    Begin::InProgress(_) => Ok("in_progress"),
                }
            }
            Caller::Naive(clients) => {
                let client = &clients[slot % clients.len()];
                let select = prepared(client, FLOOR_SELECT).await?;
                if client
                    .query_opt(&select, &[&"naive_rust", &key])
                    .await?
                    .is_some()
                {
                    return Ok("replay");
                }
                let insert = prepared(client, NAIVE_INSERT).await?;
                client
                    .execute(&insert, &[&"naive_rust", &key, &0i64])
                    .await?;
                body.run(key)
                    .map_err(|e| format!("the naive row has no failure handling: {e}"))?;
                let update = prepared(client, FLOOR_UPDATE).await?;
                client.execute(&update, &[&"naive_rust", &key]).await?;
                Ok("ok")
            }
        }
    }
}

/// Runs `cases` in order on one row.
pub async fn run(kind: RustKind, target: &Target, cases: &[Case]) -> BenchResult<Vec<Measured>> {
    // A caller per case, as wide as the case: one after another, calls use one connection
    // (as the drivers' callers do), not a pool of 64 that lends each call a different one.
    let body = Arc::new(Body::default());
    let mut out = Vec::new();
    for case in cases {
        let caller = Arc::new(Caller::connect(kind, target, case.concurrency()).await?);
        out.push(run_case(&caller, &body, case).await?);
    }
    Ok(out)
}

/// Round trips per call of a new key and of a replay: request turns the forwarder counted
/// over `calls` calls, after the connections and one call of each were made.
pub async fn round_trips(
    kind: RustKind,
    target: &Target,
    turns: &dyn Fn() -> u64,
    calls: usize,
) -> BenchResult<(f64, f64)> {
    let caller = Caller::connect(kind, target, 1).await?;
    let body = Body::default();
    caller.call(&fresh("count"), 0, &body).await?;
    let t0 = turns();
    for _ in 0..calls {
        caller.call(&fresh("count"), 0, &body).await?;
    }
    let new = (turns() - t0) as f64 / calls as f64;
    let stored = fresh("count-replay");
    caller.call(&stored, 0, &body).await?;
    caller.call(&stored, 0, &body).await?;
    let t0 = turns();
    for _ in 0..calls {
        caller.call(&stored, 0, &body).await?;
    }
    let replay = (turns() - t0) as f64 / calls as f64;
    Ok((new, replay))
}

async fn run_case(caller: &Arc<Caller>, body: &Arc<Body>, case: &Case) -> BenchResult<Measured> {
    match *case {
        Case::New { warmup, duration } => {
            timed(caller, body, warmup, duration, |_| fresh("new"), true).await
        }
        Case::Replay { warmup, duration } => {
            let stored: Vec<String> = (0..REPLAY_KEYS).map(|_| fresh("replay")).collect();
            for k in &stored {
                caller.call(k, 0, body).await?;
            }
            let keys = move |n: u64| stored[n as usize % REPLAY_KEYS].clone();
            timed(caller, body, warmup, duration, keys, false).await
        }
        Case::Hot {
            concurrency,
            rounds,
        } => hot(caller, body, concurrency, rounds).await,
        Case::Failure { rounds, retries } => {
            let mut latencies = Vec::new();
            let mut outcomes = std::collections::BTreeMap::new();
            let before = body.executions();
            let started = Instant::now();
            for _ in 0..rounds {
                let key = fresh("fail");
                for i in 0..=retries {
                    let t = Instant::now();
                    let o = caller.call(&key, 0, body).await?;
                    if i > 0 {
                        latencies.push(t.elapsed());
                        *outcomes.entry(o.to_string()).or_insert(0) += 1;
                    }
                }
            }
            Ok(Measured::new(
                latencies,
                started.elapsed().as_secs_f64(),
                body.executions() - before,
                rounds as u64,
                outcomes,
            ))
        }
    }
}

async fn timed(
    caller: &Arc<Caller>,
    body: &Arc<Body>,
    warmup: Duration,
    duration: Duration,
    keys: impl Fn(u64) -> String,
    new_keys: bool,
) -> BenchResult<Measured> {
    let mut n = 0u64;
    let until = Instant::now() + warmup;
    while Instant::now() < until {
        caller.call(&keys(n), 0, body).await?;
        n += 1;
    }
    let before = body.executions();
    let mut latencies = Vec::new();
    let started = Instant::now();
    let until = started + duration;
    while Instant::now() < until {
        let t = Instant::now();
        caller.call(&keys(n), 0, body).await?;
        latencies.push(t.elapsed());
        n += 1;
    }
    let calls = latencies.len() as u64;
    Ok(Measured::new(
        latencies,
        started.elapsed().as_secs_f64(),
        body.executions() - before,
        if new_keys { calls } else { 0 },
        Default::default(),
    ))
}

/// `concurrency` tasks wait on one barrier and call one new key when it opens, `rounds`
/// times: released together, nothing sleeps to order them.
async fn hot(
    caller: &Arc<Caller>,
    body: &Arc<Body>,
    concurrency: usize,
    rounds: usize,
) -> BenchResult<Measured> {
    let mut latencies = Vec::new();
    let mut outcomes = std::collections::BTreeMap::new();
    let before = body.executions();
    let started = Instant::now();
    for _ in 0..rounds {
        let key = Arc::new(fresh("hot"));
        let barrier = Arc::new(tokio::sync::Barrier::new(concurrency));
        let mut tasks = Vec::new();
        for slot in 0..concurrency {
            let (caller, body, key, barrier) =
                (caller.clone(), body.clone(), key.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let t = Instant::now();
                let o = caller.call(&key, slot, &body).await;
                (t.elapsed(), o.map_err(|e| e.to_string()))
            }));
        }
        for t in tasks {
            let (took, o) = t.await?;
            latencies.push(took);
            let o = o
                .map(str::to_string)
                .unwrap_or_else(|e| format!("error: {e}"));
            *outcomes.entry(o.to_string()).or_insert(0) += 1;
        }
    }
    Ok(Measured::new(
        latencies,
        started.elapsed().as_secs_f64(),
        body.executions() - before,
        rounds as u64,
        outcomes,
    ))
}
