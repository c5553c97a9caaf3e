//! F12, an unknown outcome is a decision: a holder dies after its effect and before its
//! completion (or before its effect), its lease lapses, and another dispatcher (on the same
//! store: the same database, the same Redis, the same MemoryStore) retries the call; the
//! takeover is `recovered`, and the tool's `Idempotent::on_unknown_outcome` decides:
//!
//! - **Rerun**: the tool runs again (recovered, a higher fence, the same upstream key); the
//!   ledger, a provider that deduplicates on the upstream key, keeps one effect. Two runs is
//!   what Rerun means: one effect only because the upstream deduplicates.
//! - **Refuse**: no second run; the call and every retry answer `OutcomeUnknown`; after
//!   `forget`, the next call runs once (a new life, a new upstream key).
//! - **Reconcile**, a read that looks the effect up in the ledger by upstream key: the holder
//!   died after its effect: Found, no second run, the record holds the found result (the one
//!   the first run returned), the call answers it as a replay; the holder died before its
//!   effect: NotFound, the tool runs once.
//!
//! The holder dies as a process would: the dispatch is dropped while its tool waits at a
//! gate, which ends the holder (tool, heartbeat and all) before anything is recorded, so
//! its lease lapses. On PgStore (the backend under test), MemoryStore and RedisStore (a
//! private redis-server).

use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_idempotency_client::{
    Dispatched, Dispatcher, ErrorKind, IdempotencyStore, Idempotent, MemoryStore, OnUnknownOutcome,
    PgStore, RedisStore, ToolSpec,
};
use pg_idempotency_faults::check::Invariant;
use pg_idempotency_faults::client_calls::{
    effects_of, receipt, Counting, EffectTool, Point, PrivateRedis, Verdict, BOUND,
};
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_tests as suite;
use serde_json::{json, Value};

const NAME: &str = "pgidem_faults_f12";
/// The second dispatcher's lease: long, its run must not lapse.
const LONG_LEASE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Rerun,
    Refuse,
    /// The holder died after its effect: the read finds it.
    ReconcileFound,
    /// The holder died before its effect: the read finds nothing.
    ReconcileNotFound,
}

const CHOICES: [Choice; 4] = [
    Choice::Rerun,
    Choice::Refuse,
    Choice::ReconcileFound,
    Choice::ReconcileNotFound,
];

/// ClientSettings naming the call by its input's `id`, with this lease and choice.
fn settings(lease: Duration, choice: Option<Choice>, ledger_dsn: &str) -> Idempotent {
    let idem = Idempotent::new()
        .key_supplier(|v: &Value| v["id"].as_str().map(str::to_string))
        .lease(lease);
    match choice {
        None | Some(Choice::Rerun) => idem.on_unknown_outcome(OnUnknownOutcome::Rerun),
        Some(Choice::Refuse) => idem.on_unknown_outcome(OnUnknownOutcome::Refuse),
        Some(Choice::ReconcileFound | Choice::ReconcileNotFound) => {
            let dsn = ledger_dsn.to_string();
            idem.reconcile(move |call| EffectTool::look_up(dsn.clone(), call))
        }
    }
}

/// One trial: the first holder dies (after or before its effect), the second dispatcher
/// takes the call over under `choice`. The findings, and the store operations counted.
async fn trial(
    first_store: Arc<dyn IdempotencyStore>,
    second_store: Arc<dyn IdempotencyStore>,
    short_lease: Duration,
    ledger_dsn: &str,
    choice: Choice,
    n: usize,
) -> (Verdict, usize, usize) {
    let first = Counting::new(first_store);
    let second = Counting::new(second_store);
    let name = suite::scope("f12_pay");
    let key = format!("pay-{n}-{choice:?}");
    let input = json!({"id": key, "amount": 100 + n});
    let mut verdict = Verdict::default();

    // The first holder: its tool waits at the gate (after or before its effect) and the
    // dispatch is dropped there, which ends the holder: nothing is recorded, no heartbeat.
    let doomed = EffectTool::new(ledger_dsn);
    let d1 = Arc::new(Dispatcher::new(first.clone()));
    d1.register(ToolSpec::new(&name, doomed.clone()).idempotent(settings(
        short_lease,
        None,
        ledger_dsn,
    )))
    .unwrap();
    let point = match choice {
        Choice::ReconcileNotFound => Point::BeforeEffect,
        _ => Point::AfterEffect,
    };
    doomed.gate.arm(point);
    let d = d1.clone();
    let (nm, i) = (name.clone(), input.clone());
    let task = tokio::spawn(async move { d.dispatch(&nm, i).await });
    doomed.gate.reached().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let (fence1, _, _, upstream1) = doomed.contexts.lock().unwrap()[0];
    let effects = effects_of(ledger_dsn, &key).await;
    let expected_first = usize::from(point == Point::AfterEffect);
    assert_eq!(
        effects.len(),
        expected_first,
        "the first holder died {point:?}: {effects:?}"
    );

    // Another dispatcher on the same store, with the choice under test.
    let tool = EffectTool::new(ledger_dsn);
    let d2 = Dispatcher::new(second.clone());
    d2.register(ToolSpec::new(&name, tool.clone()).idempotent(settings(
        LONG_LEASE,
        Some(choice),
        ledger_dsn,
    )))
    .unwrap();
    // Until the first holder's lease lapses, the call is in progress.
    let until = Instant::now() + BOUND;
    let answer = loop {
        match d2.dispatch(&name, input.clone()).await {
            Ok(Dispatched::InProgress { retry_after }) => {
                assert!(Instant::now() < until, "still in progress after {BOUND:?}");
                tokio::time::sleep(retry_after.min(Duration::from_millis(50))).await;
            }
            other => break other,
        }
    };
    // The first holder left nothing behind: it never completed.
    let runs = tool.runs();
    let effects = effects_of(ledger_dsn, &key).await;
    match choice {
        Choice::Rerun | Choice::ReconcileNotFound => {
            let ctx = tool.contexts.lock().unwrap().first().copied();
            let Some((fence, attempt, recovered, upstream)) = ctx else {
                verdict.expect(
                    Invariant::I1,
                    &key,
                    false,
                    format!("{choice:?}: the takeover did not run the tool: {answer:?}"),
                );
                return (verdict, 0, 0);
            };
            assert!(recovered && attempt == 2, "a takeover: {ctx:?}");
            assert!(fence > fence1, "a higher fence: {fence} after {fence1}");
            assert_eq!(upstream, upstream1, "the same upstream key");
            let result = receipt(&key, upstream, fence);
            verdict.expect(
                Invariant::I2,
                &key,
                answer.as_ref().ok() == Some(&Dispatched::Ran(result.clone())),
                format!("{choice:?}: the takeover answered {answer:?}"),
            );
            verdict.expect(
                Invariant::I1,
                &key,
                runs == 1 && effects.len() == 1,
                format!("{choice:?}: {runs} runs of the takeover, effects {effects:?}"),
            );
            verdict
                .recorded(second.as_ref(), &name, &key, &result)
                .await;
            let again = d2.dispatch(&name, input.clone()).await;
            verdict.expect(
                Invariant::I2,
                &key,
                matches!(&again, Ok(Dispatched::Replayed(v)) if *v == result),
                format!("{choice:?}: a retry answered {again:?}"),
            );
            if choice == Choice::Rerun {
                // What Rerun means: the tool ran twice, the upstream deduplicated.
                assert_eq!(doomed.runs() + tool.runs(), 2);
                assert_eq!(effects[0], (upstream1, fence1), "the first effect is kept");
            }
        }
        Choice::Refuse => {
            verdict.expect(
                Invariant::I1,
                &key,
                runs == 0 && effects.len() == 1,
                format!("Refuse: {runs} runs, effects {effects:?}"),
            );
            verdict.expect(
                Invariant::I2,
                &key,
                matches!(&answer, Err(e) if e.kind == ErrorKind::OutcomeUnknown),
                format!("Refuse: the takeover answered {answer:?}"),
            );
            for _ in 0..3 {
                let again = d2.dispatch(&name, input.clone()).await;
                verdict.expect(
                    Invariant::I2,
                    &key,
                    matches!(&again, Err(e) if e.kind == ErrorKind::OutcomeUnknown && e.replayed()),
                    format!("Refuse: a retry answered {again:?}"),
                );
            }
            verdict.expect(
                Invariant::I1,
                &key,
                tool.runs() == 0 && effects_of(ledger_dsn, &key).await.len() == 1,
                "Refuse: a retry ran the tool",
            );
            // The operator found out and forgets the record: the next call runs, once.
            assert!(second.forget(&name, &key).await.unwrap());
            let after = d2.dispatch(&name, input.clone()).await;
            let ctx = tool.contexts.lock().unwrap().first().copied();
            let ran = match (&after, ctx) {
                (Ok(Dispatched::Ran(v)), Some((fence, 1, false, upstream))) => {
                    *v == receipt(&key, upstream, fence) && upstream != upstream1
                }
                _ => false,
            };
            verdict.expect(
                Invariant::I2,
                &key,
                ran,
                format!("Refuse: after forget the call answered {after:?}, ran as {ctx:?}"),
            );
            let effects = effects_of(ledger_dsn, &key).await;
            verdict.expect(
                Invariant::I1,
                &key,
                tool.runs() == 1 && effects.len() == 2,
                format!(
                    "Refuse, then forget: {} runs, effects {effects:?} (one per life)",
                    tool.runs()
                ),
            );
        }
        Choice::ReconcileFound => {
            let found = receipt(&key, upstream1, fence1);
            verdict.expect(
                Invariant::I1,
                &key,
                runs == 0 && effects.len() == 1,
                format!("Reconcile (found): {runs} runs, effects {effects:?}"),
            );
            verdict.expect(
                Invariant::I2,
                &key,
                answer.as_ref().ok() == Some(&Dispatched::Replayed(found.clone())),
                format!("Reconcile (found): the takeover answered {answer:?}"),
            );
            verdict.recorded(second.as_ref(), &name, &key, &found).await;
            let again = d2.dispatch(&name, input.clone()).await;
            verdict.expect(
                Invariant::I2,
                &key,
                matches!(&again, Ok(Dispatched::Replayed(v)) if *v == found),
                format!("Reconcile (found): a retry answered {again:?}"),
            );
            verdict.expect(
                Invariant::I1,
                &key,
                tool.runs() == 0,
                "Reconcile (found): a retry ran the tool",
            );
        }
    }
    let (a, b) = (first.counts(), second.counts());
    (verdict, a.operations + b.operations, a.unknown + b.unknown)
}

/// Every choice, `report::trials(per_choice)` times, on the stores `stores` makes; tallied
/// under `scenario`.
async fn every_choice(
    scenario: &str,
    stores: impl Fn() -> (Arc<dyn IdempotencyStore>, Arc<dyn IdempotencyStore>),
    short_lease: Duration,
    ledger_dsn: &str,
    per_choice: usize,
) -> Tally {
    let mut tally = Tally::new(scenario);
    for n in 0..report::trials(per_choice) {
        for choice in CHOICES {
            let (a, b) = stores();
            let t = Instant::now();
            let (verdict, operations, unknown) =
                trial(a, b, short_lease, ledger_dsn, choice, n).await;
            tally.add_counted(operations, unknown, 1, &verdict.violations);
            eprintln!(
                "{scenario}: trial {n} {choice:?}: {operations} operations, {:?}",
                t.elapsed()
            );
            verdict.assert_clean(&format!("{scenario}, trial {n}, {choice:?}"));
        }
    }
    tally
}

async fn ledger_db(name: &str) -> String {
    let db = format!("{NAME}_{name}_ledger");
    let dsn = tokio::task::spawn_blocking(move || suite::fresh_database(&db))
        .await
        .unwrap();
    ledger::create(&dsn).await.unwrap();
    dsn
}

async fn drop_db(name: &str) {
    let db = format!("{NAME}_{name}");
    tokio::task::spawn_blocking(move || suite::drop_database(&db))
        .await
        .unwrap();
}

fn pg_store(dsn: &str) -> Arc<dyn IdempotencyStore> {
    let config: tokio_postgres::Config = dsn.parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()
        .unwrap();
    Arc::new(PgStore::new(pool))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_outcome_is_decided_by_the_tool_on_pg_store() {
    let server = tokio::task::spawn_blocking(|| {
        let dsn = suite::fresh_database(&format!("{NAME}_pg"));
        suite::install(&dsn);
        dsn
    })
    .await
    .unwrap();
    let ledger_dsn = ledger_db("pg").await;
    // Two dispatchers, each with a pool of its own on the same database.
    let tally = every_choice(
        "F12 unknown outcome decided",
        || (pg_store(&server), pg_store(&server)),
        Duration::from_millis(1000),
        &ledger_dsn,
        2,
    )
    .await;
    tally.close(&server, "").await;
    drop_db("pg").await;
    drop_db("pg_ledger").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_outcome_is_decided_by_the_tool_on_memory_store() {
    let ledger_dsn = ledger_db("memory").await;
    let tally = every_choice(
        "F12 unknown outcome decided",
        || {
            let store: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::new());
            (store.clone(), store)
        },
        Duration::from_millis(200),
        &ledger_dsn,
        2,
    )
    .await;
    tally.write("MemoryStore", "—");
    drop_db("memory_ledger").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_outcome_is_decided_by_the_tool_on_redis_store() {
    let Some(redis) = PrivateRedis::start("f12") else {
        return;
    };
    let ledger_dsn = ledger_db("redis").await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conns = Vec::new();
    for _ in 0..2 {
        conns.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    let tally = every_choice(
        "F12 unknown outcome decided",
        || {
            // Two connections, one prefix: two services sharing one Redis.
            let prefix = format!("{}:", suite::scope("f12"));
            (
                Arc::new(RedisStore::new(conns[0].clone(), prefix.clone()))
                    as Arc<dyn IdempotencyStore>,
                Arc::new(RedisStore::new(conns[1].clone(), prefix)) as Arc<dyn IdempotencyStore>,
            )
        },
        Duration::from_millis(300),
        &ledger_dsn,
        2,
    )
    .await;
    tally.write("RedisStore", &redis.version());
    drop(redis);
    drop_db("redis_ledger").await;
}
