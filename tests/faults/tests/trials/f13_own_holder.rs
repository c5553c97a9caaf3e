//! F13, a process never races its own holder: a call through the Rust client's dispatcher
//! runs its effect (a row in the ledger), and the store goes down right after it, for
//! longer than the lease (lease 1 s, store down 1 to 10 s). Meanwhile the same process
//! retries the call through the same dispatcher: one caller with the client's own
//! `Retry::default()`, called again 20 ms after each answer that is not the store's, and
//! one by hand every 20 ms. When the store is back the holder, alive all along, holds the
//! result, and its lease has lapsed: a retry that took the call over through the store
//! (the default `Rerun`) would run the tool a second time.
//!
//! On PgStore: a throwaway server stopped (`pg_ctl stop -m immediate`) and started again.
//! On RedisStore: a private `redis-server` (append-only file synced at every write) killed
//! and launched again. MemoryStore lives in the caller's process and cannot go down apart
//! from it.
//!
//! In every trial: exactly one effect for the call's key (I1: one run of the tool; the
//! ledger, deduplicating on the upstream key, would hide a second), every answer the callers got
//! that carries a result carries the first run's (I2), and the record ends succeeded with it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pg_idempotency_client::{
    Attempt, Dispatched, Dispatcher, ErrorKind, IdempotencyStore, Idempotent, PgStore, RedisStore,
    Retry, ToolSpec,
};
use pg_idempotency_faults::check::Invariant;
use pg_idempotency_faults::client_calls::{
    effects_of, Counting, EffectTool, Point, PrivateRedis, Verdict, BOUND,
};
use pg_idempotency_faults::crash_server::CrashServer;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_tests as suite;
use serde_json::{json, Value};

const NAME: &str = "pgidem_faults_f13";
/// Shorter than every outage: the lease lapses while the store is down.
const LEASE: Duration = Duration::from_secs(1);
/// How long the store stays down in trial n (cycled): 1 to 10 s, the short ones first so
/// that the test command's short run (3 trials) covers a short, a middle and a long one.
const OUTAGES_MS: [u64; 10] = [
    1_200, 4_000, 2_000, 9_500, 1_500, 6_000, 3_000, 10_000, 2_500, 7_500,
];
/// How often the callers come back.
const PACE: Duration = Duration::from_millis(20);

/// The store under test, which a trial takes down and brings back.
enum Server {
    Pg(Arc<CrashServer>),
    Redis(Arc<Mutex<PrivateRedis>>),
}

impl Server {
    async fn down(&self) {
        match self {
            Server::Pg(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.cluster.stop_immediate()).await
            }
            Server::Redis(r) => {
                let r = r.clone();
                tokio::task::spawn_blocking(move || r.lock().unwrap().kill()).await
            }
        }
        .unwrap()
    }

    async fn up(&self) {
        match self {
            Server::Pg(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.cluster.start_again()).await
            }
            Server::Redis(r) => {
                let r = r.clone();
                tokio::task::spawn_blocking(move || r.lock().unwrap().launch()).await
            }
        }
        .unwrap()
    }

    /// A fresh store on the server, for one trial.
    async fn store(&self) -> Arc<dyn IdempotencyStore> {
        match self {
            Server::Pg(s) => {
                let config: tokio_postgres::Config = s.dsn().parse().unwrap();
                let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
                let pool = deadpool_postgres::Pool::builder(manager)
                    .max_size(4)
                    .build()
                    .unwrap();
                Arc::new(PgStore::new(pool))
            }
            Server::Redis(r) => {
                let url = r.lock().unwrap().url();
                let config = redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Duration::from_millis(500))
                    .set_connection_timeout(Duration::from_millis(500));
                let store = RedisStore::connect(
                    redis::Client::open(url.as_str()).unwrap(),
                    config,
                    format!("{}:", suite::scope("f13")),
                )
                .await
                .unwrap();
                Arc::new(store)
            }
        }
    }
}

/// The result an answer carries: a run's, a replay's, or an `Unrecorded` error's.
fn result_of(answer: &pg_idempotency_client::Result<Dispatched>) -> Option<Value> {
    match answer {
        Ok(Dispatched::Ran(v)) | Ok(Dispatched::Replayed(v)) => Some(v.clone()),
        Err(e) if e.kind == ErrorKind::Unrecorded => e.response().cloned(),
        _ => None,
    }
}

/// Whether a caller is done: the store answered the call (a run or a replay).
fn from_the_store(answer: &pg_idempotency_client::Result<Dispatched>) -> bool {
    matches!(answer, Ok(Dispatched::Ran(_)) | Ok(Dispatched::Replayed(_)))
}

/// How a caller retries.
#[derive(Debug, Clone, Copy)]
enum Caller {
    /// `Retry::default()` around each dispatch (in progress waited for, store errors
    /// retried), called again after `PACE` until the store answers.
    WithRetry,
    /// A dispatch every `PACE` until the store answers.
    ByHand,
}

/// Calls until the store answers (at most `BOUND`): every answer it got.
async fn keep_calling(
    caller: Caller,
    d: Arc<Dispatcher>,
    name: String,
    input: Value,
) -> Vec<pg_idempotency_client::Result<Dispatched>> {
    let started = Instant::now();
    let mut answers = Vec::new();
    while started.elapsed() < BOUND {
        let answer = match caller {
            Caller::ByHand => d.dispatch(&name, input.clone()).await,
            Caller::WithRetry => {
                Retry::default()
                    .run(|| async {
                        match d.dispatch(&name, input.clone()).await? {
                            Dispatched::InProgress { retry_after } => Ok(Attempt::Again {
                                after: Some(retry_after),
                            }),
                            done => Ok(Attempt::Done(done)),
                        }
                    })
                    .await
            }
        };
        let done = from_the_store(&answer);
        answers.push(answer);
        if done {
            break;
        }
        tokio::time::sleep(PACE).await;
    }
    answers
}

/// One trial: the effect, the store down for `outage`, the callers at it, the store back.
async fn trial(server: &Server, ledger_dsn: &str, n: usize) -> (Verdict, Arc<Counting>, usize) {
    let outage = Duration::from_millis(OUTAGES_MS[n % OUTAGES_MS.len()]);
    let store = Counting::new(server.store().await);
    let tool = EffectTool::new(ledger_dsn);
    let name = suite::scope("f13_tool");
    let d = Arc::new(Dispatcher::new(store.clone()));
    d.register(ToolSpec::new(&name, tool.clone()).idempotent(Idempotent::new().lease(LEASE)))
        .unwrap();
    let input = json!({"trial": n, "outage_ms": outage.as_millis() as u64});
    tool.gate.arm(Point::AfterEffect);
    let first = tokio::spawn(keep_one(d.clone(), name.clone(), input.clone()));
    tool.gate.reached().await;
    server.down().await;
    tool.gate.open();
    let callers: Vec<_> = [Caller::WithRetry, Caller::ByHand]
        .into_iter()
        .map(|c| tokio::spawn(keep_calling(c, d.clone(), name.clone(), input.clone())))
        .collect();
    tokio::time::sleep(outage).await;
    server.up().await;
    let mut answers = vec![first.await.unwrap()];
    for c in callers {
        answers.extend(c.await.unwrap());
    }
    let mut verdict = Verdict::default();
    let Some(result) = answers.iter().find_map(result_of) else {
        verdict.expect(
            Invariant::I2,
            &name,
            false,
            format!("no answer carries the effect's result: {answers:?}"),
        );
        return (verdict, store, 0);
    };
    let key = result["key"].as_str().unwrap_or_default().to_string();
    suite::eventually_async(BOUND, || async {
        matches!(store.lookup(&name, &key).await,
                 Ok(Some(r)) if r.state != pg_idempotency_client::State::InProgress)
    })
    .await;
    // Every run of the tool performs the effect: the ledger keeps one row per upstream
    // key (it deduplicates as a provider that honours the key would), so the runs are
    // the effects a provider that does not would have seen.
    let effects = tool.runs() as usize;
    let rows = effects_of(ledger_dsn, &key).await.len();
    verdict.expect(
        Invariant::I1,
        &key,
        effects == 1,
        format!("{effects} effects for one call (outage {outage:?}, {rows} ledger rows)"),
    );
    for answer in &answers {
        if let Some(other) = result_of(answer) {
            verdict.expect(
                Invariant::I2,
                &key,
                other == result,
                format!("a caller got {other}, another {result}"),
            );
        }
    }
    verdict.recorded(store.as_ref(), &name, &key, &result).await;
    (verdict, store, effects)
}

/// The first call: one dispatch.
async fn keep_one(
    d: Arc<Dispatcher>,
    name: String,
    input: Value,
) -> pg_idempotency_client::Result<Dispatched> {
    d.dispatch(&name, input).await
}

/// Runs the trials on `server`: their tally, and how many had more than one effect.
async fn trials(server: &Server, ledger_dsn: &str, what: &str) -> (Tally, usize, usize) {
    let mut tally =
        Tally::new("F13 a retry in the holder's process, the lease shorter than the outage");
    let (mut doubled, n_trials) = (0, report::trials(3));
    for n in 0..n_trials {
        let t = Instant::now();
        let (verdict, store, effects) = trial(server, ledger_dsn, n).await;
        let counts = store.counts();
        tally.add_counted(counts.operations, counts.unknown, 1, &verdict.violations);
        doubled += usize::from(effects > 1);
        eprintln!(
            "F13 {what} trial {n}: {effects} effects, {counts:?}, {:?}, {} violations",
            t.elapsed(),
            verdict.violations.len()
        );
        for v in &verdict.violations {
            eprintln!("  {v}");
        }
    }
    eprintln!("F13 {what}: {doubled} of {n_trials} trials had a second effect");
    (tally, doubled, n_trials)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_never_races_its_own_holder_on_pg_store() {
    let server = tokio::task::spawn_blocking(|| CrashServer::start("f13", NAME))
        .await
        .unwrap();
    let server = Arc::new(server);
    let ledger_dsn =
        tokio::task::spawn_blocking(|| suite::fresh_database(&format!("{NAME}_ledger")))
            .await
            .unwrap();
    pg_idempotency_faults::ledger::create(&ledger_dsn)
        .await
        .unwrap();
    let (tally, doubled, n) = trials(&Server::Pg(server.clone()), &ledger_dsn, "PgStore").await;
    tally.close(&server.dsn(), "").await;
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&format!("{NAME}_ledger"));
        drop(server);
    })
    .await
    .unwrap();
    assert!(
        tally.violations.is_empty(),
        "{doubled} of {n} trials had a second effect: {tally:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_never_races_its_own_holder_on_redis_store() {
    let Some(redis) = PrivateRedis::start("f13") else {
        return;
    };
    let redis = Arc::new(Mutex::new(redis));
    let ledger_db = format!("{NAME}_redis_ledger");
    let ledger_dsn = {
        let db = ledger_db.clone();
        tokio::task::spawn_blocking(move || suite::fresh_database(&db))
            .await
            .unwrap()
    };
    pg_idempotency_faults::ledger::create(&ledger_dsn)
        .await
        .unwrap();
    let (tally, doubled, n) =
        trials(&Server::Redis(redis.clone()), &ledger_dsn, "RedisStore").await;
    let version = redis.lock().unwrap().version();
    tally.write("RedisStore", &version);
    drop(redis);
    tokio::task::spawn_blocking(move || suite::drop_database(&ledger_db))
        .await
        .unwrap();
    assert!(
        tally.violations.is_empty(),
        "{doubled} of {n} trials had a second effect: {tally:?}"
    );
}
