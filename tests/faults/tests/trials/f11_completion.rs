//! F11, no second effect from a store failure: a call through the Rust client's dispatcher
//! (a tool whose effect lands in the ledger under the claim's fence) or its web executor (a
//! POST to a provider that counts what it executes) runs its effect, and then the store
//! fails before the result is recorded:
//!
//! - **lost reply**: the proxy drops the reply of the completion after the server committed
//!   it (the holder's retry with the same fence is told the stored state);
//! - **server stopped**: the tool (or the provider's answer) waits at a gate after its
//!   effect; the server under test (a throwaway one) is stopped; the tool returns; the test
//!   waits until the holder's completion has failed, then starts the server again; the
//!   completion, retried under its fence, lands;
//! - **crash mid-completion**: the record's row is locked by another session, so that the
//!   completion waits inside the server (seen in `pg_stat_activity`); the server crashes
//!   (`pg_ctl stop -m immediate`) and is started again; the completion is retried and lands.
//!
//! On RedisStore (a private `redis-server` of the test's own, with an append-only file
//! synced at every write, so that a restart keeps what was acknowledged): the server paused
//! (SIGSTOP: the completion times out) and resumed, and the server restarted, between the
//! run and the completion. MemoryStore lives in the caller's process: it cannot fail apart
//! from the call, so it has no such trial.
//!
//! In every trial: exactly one effect for the call's key (ledger, or provider executions),
//! the record ends succeeded with the tool's result, and a retry replays it without running
//! anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_idempotency_client::{
    Action, Dispatched, Dispatcher, ErrorKind, IdempotencyStore, Idempotent, Method, PgStore,
    RedisStore, ToolSpec, WebExecutor,
};
use pg_idempotency_faults::check::Invariant;
use pg_idempotency_faults::client_calls::{
    effects_of, Counting, EffectTool, Point, PrivateRedis, Provider, Verdict, BOUND,
};
use pg_idempotency_faults::crash_server::{self, CrashServer};
use pg_idempotency_faults::proxy::{Fault, Proxy, Trigger, Upstream};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_tests as suite;
use serde_json::{json, Value};

const NAME: &str = "pgidem_faults_f11";
/// Long: the dispatch waits for the recording up to the lease, and no trial may see the
/// lease lapse (the fault is over within seconds).
const LEASE: Duration = Duration::from_secs(60);

/// The fault of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault11 {
    LostReply,
    Stopped,
    CrashMidCompletion,
}

/// What a trial goes through: a tool in the dispatcher, or an action of the web executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    Dispatcher,
    Web,
}

/// The call under test, through either front, with what counts its effects.
struct Caller {
    front: Front,
    dispatcher: Option<Dispatcher>,
    executor: Option<WebExecutor>,
    tool: Option<Arc<EffectTool>>,
    provider: Option<Arc<Provider>>,
    ledger_dsn: String,
    name: String,
}

impl Caller {
    fn new(
        front: Front,
        store: Arc<dyn IdempotencyStore>,
        ledger_dsn: &str,
        provider: &Arc<Provider>,
    ) -> Caller {
        let name = suite::scope(match front {
            Front::Dispatcher => "f11_tool",
            Front::Web => "f11_charge",
        });
        let idem = Idempotent::new().lease(LEASE);
        match front {
            Front::Dispatcher => {
                let tool = EffectTool::new(ledger_dsn);
                let dispatcher = Dispatcher::new(store);
                dispatcher
                    .register(ToolSpec::new(&name, tool.clone()).idempotent(idem))
                    .unwrap();
                Caller {
                    front,
                    dispatcher: Some(dispatcher),
                    executor: None,
                    tool: Some(tool),
                    provider: None,
                    ledger_dsn: ledger_dsn.into(),
                    name,
                }
            }
            Front::Web => {
                let executor = WebExecutor::new(store);
                executor
                    .register(
                        Action::new(&name, Method::POST, format!("{}/charge", provider.base))
                            .idempotent(idem)
                            // The bare call key: the trial counts the provider's effects
                            // and reads the store by the key the provider saw.
                            .upstream_key(pg_idempotency_client::UpstreamKey::CallKey),
                    )
                    .unwrap();
                Caller {
                    front,
                    dispatcher: None,
                    executor: Some(executor),
                    tool: None,
                    provider: Some(provider.clone()),
                    ledger_dsn: ledger_dsn.into(),
                    name,
                }
            }
        }
    }

    async fn call(&self, input: &Value) -> pg_idempotency_client::Result<Dispatched> {
        match self.front {
            Front::Dispatcher => {
                self.dispatcher
                    .as_ref()
                    .unwrap()
                    .dispatch(&self.name, input.clone())
                    .await
            }
            Front::Web => {
                self.executor
                    .as_ref()
                    .unwrap()
                    .execute(&self.name, input.clone())
                    .await
            }
        }
    }

    /// Holds the next run at its gate after its effect.
    fn hold_after_effect(&self) {
        match self.front {
            Front::Dispatcher => self.tool.as_ref().unwrap().gate.arm(Point::AfterEffect),
            Front::Web => self.provider.as_ref().unwrap().gate.arm(Point::AfterEffect),
        }
    }

    async fn held(&self) {
        match self.front {
            Front::Dispatcher => self.tool.as_ref().unwrap().gate.reached().await,
            Front::Web => self.provider.as_ref().unwrap().gate.reached().await,
        }
    }

    fn release(&self) {
        match self.front {
            Front::Dispatcher => self.tool.as_ref().unwrap().gate.open(),
            Front::Web => self.provider.as_ref().unwrap().gate.open(),
        }
    }

    /// The call's key, read from its result (both fronts put it there).
    fn key_of(result: &Value) -> String {
        result["key"]
            .as_str()
            .unwrap_or_else(|| panic!("a result names its key: {result}"))
            .to_string()
    }

    /// The effects made for `key`.
    async fn effects(&self, key: &str) -> usize {
        match self.front {
            Front::Dispatcher => effects_of(&self.ledger_dsn, key).await.len(),
            Front::Web => self
                .provider
                .as_ref()
                .unwrap()
                .executed()
                .iter()
                .filter(|r| r.key.as_deref() == Some(key))
                .count(),
        }
    }
}

/// The result of a call that ran: `Ran(v)`, or `Unrecorded` carrying v (the dispatch gave up
/// waiting for the recording; the holder goes on).
fn result_of(answer: &pg_idempotency_client::Result<Dispatched>) -> Option<Value> {
    match answer {
        Ok(Dispatched::Ran(v)) => Some(v.clone()),
        Err(e) if e.kind == ErrorKind::Unrecorded => e.response().cloned(),
        _ => None,
    }
}

/// Waits until the record of the call is completed (the holder may still be recording in
/// the background after an `Unrecorded` answer).
/// A record still in progress after [`BOUND`] is left for the judge to report.
async fn until_completed(store: &dyn IdempotencyStore, scope: &str, key: &str) {
    suite::eventually_async(BOUND, || async {
        matches!(store.lookup(scope, key).await,
                 Ok(Some(r)) if r.state != pg_idempotency_client::State::InProgress)
    })
    .await;
}

/// After the call: one effect, the record succeeded with the result, a retry replays it
/// and runs nothing.
async fn judge(
    caller: &Caller,
    store: &dyn IdempotencyStore,
    input: &Value,
    answer: &pg_idempotency_client::Result<Dispatched>,
    runs_before: usize,
) -> Verdict {
    let mut verdict = Verdict::default();
    let Some(result) = result_of(answer) else {
        verdict.expect(
            Invariant::I2,
            &caller.name,
            false,
            format!("the call ran its effect; it answered {answer:?}"),
        );
        return verdict;
    };
    let key = Caller::key_of(&result);
    until_completed(store, &caller.name, &key).await;
    let effects = caller.effects(&key).await;
    verdict.expect(
        Invariant::I1,
        &key,
        effects == 1,
        format!("{effects} effects for one call"),
    );
    verdict.recorded(store, &caller.name, &key, &result).await;
    let again = caller.call(input).await;
    verdict.expect(
        Invariant::I2,
        &key,
        matches!(&again, Ok(Dispatched::Replayed(v)) if *v == result),
        format!("a retry answered {again:?}, not the replay of {result}"),
    );
    let effects = caller.effects(&key).await;
    verdict.expect(
        Invariant::I1,
        &key,
        effects == 1,
        format!("{effects} effects after the retry"),
    );
    let runs = runs_of(caller) - runs_before;
    verdict.expect(
        Invariant::I1,
        &key,
        runs == 1,
        format!("the call ran {runs} times"),
    );
    verdict
}

/// Runs of the tool (or requests the provider received) so far.
fn runs_of(caller: &Caller) -> usize {
    match caller.front {
        Front::Dispatcher => caller.tool.as_ref().unwrap().runs() as usize,
        Front::Web => caller.provider.as_ref().unwrap().seen().len(),
    }
}

/// A pool of PgStore connections to `dsn`.
fn pg_store(dsn: &str) -> Arc<dyn IdempotencyStore> {
    let config: tokio_postgres::Config = dsn.parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(4)
        .build()
        .unwrap();
    Arc::new(PgStore::new(pool))
}

/// Locks the row of `scope`'s record in a transaction of its own, so that a completion
/// waits on it; the session is returned (it dies with the crash).
async fn lock_the_record(server: &CrashServer, scope: &str) -> tokio_postgres::Client {
    let c = crash_server::connect_when_up(&server.dsn()).await;
    c.batch_execute("BEGIN").await.unwrap();
    let locked = c
        .query(
            "SELECT 1 FROM idempotency.records WHERE scope = $1 FOR UPDATE",
            &[&scope],
        )
        .await
        .unwrap();
    assert_eq!(locked.len(), 1, "the call's record is there to lock");
    c
}

/// Waits until a session runs a completion of `scope` and waits on a lock.
async fn until_completion_waits(server: &CrashServer) {
    let c = crash_server::connect_when_up(&server.dsn()).await;
    suite::until_async(
        "a completion to wait on the locked record",
        BOUND,
        || async {
            let waiting: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                 WHERE query LIKE '%idem_complete%' AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            waiting > 0
        },
    )
    .await;
}

async fn crash_and_restart(server: &Arc<CrashServer>) {
    let s = server.clone();
    tokio::task::spawn_blocking(move || {
        s.cluster.stop_immediate();
        s.cluster.start_again();
    })
    .await
    .unwrap();
}

/// One trial on PgStore through the proxy in front of the throwaway server.
async fn pg_trial(
    server: &Arc<CrashServer>,
    proxy: &Proxy,
    ledger_dsn: &str,
    provider: &Arc<Provider>,
    front: Front,
    fault: Fault11,
    n: usize,
) -> (Verdict, Counting_) {
    // A fresh pool per trial: a first completion on a connection sends its statement's
    // text, which the proxy's trigger matches.
    let store = Counting::new(pg_store(&proxy.dsn(&server.dsn())));
    let caller = Caller::new(front, store.clone(), ledger_dsn, provider);
    let input = json!({"trial": n, "fault": format!("{fault:?}"), "amount": 100 + n});
    let runs_before = runs_of(&caller);
    let fired_before = proxy.fired();
    let answer = match fault {
        Fault11::LostReply => {
            proxy.set_once(Fault::DropReplyAfterCommit(Trigger::QueryContains(
                "idem_complete".into(),
            )));
            let answer = caller.call(&input).await;
            proxy.set(Fault::None);
            assert_eq!(
                proxy.fired() - fired_before,
                1,
                "the completion's reply was dropped once"
            );
            answer
        }
        Fault11::Stopped => {
            caller.hold_after_effect();
            let caller = Arc::new(caller);
            let c = caller.clone();
            let i = input.clone();
            let task = tokio::spawn(async move { c.call(&i).await });
            caller.held().await;
            let s = server.clone();
            tokio::task::spawn_blocking(move || s.cluster.stop_immediate())
                .await
                .unwrap();
            caller.release();
            store
                .until(
                    "the holder's completion fails while the server is down",
                    |c| c.failed_completions >= 1,
                )
                .await;
            let s = server.clone();
            tokio::task::spawn_blocking(move || s.cluster.start_again())
                .await
                .unwrap();
            let answer = task.await.unwrap();
            let caller = Arc::try_unwrap(caller).ok().expect("the call has ended");
            let verdict = judge(&caller, store.as_ref(), &input, &answer, runs_before).await;
            return (verdict, Counting_(store));
        }
        Fault11::CrashMidCompletion => {
            caller.hold_after_effect();
            let caller = Arc::new(caller);
            let c = caller.clone();
            let i = input.clone();
            let task = tokio::spawn(async move { c.call(&i).await });
            caller.held().await;
            let locker = lock_the_record(server, &caller.name).await;
            caller.release();
            until_completion_waits(server).await;
            crash_and_restart(server).await;
            drop(locker);
            store
                .until("the completion in flight at the crash failed", |c| {
                    c.failed_completions >= 1
                })
                .await;
            let answer = task.await.unwrap();
            let caller = Arc::try_unwrap(caller).ok().expect("the call has ended");
            let verdict = judge(&caller, store.as_ref(), &input, &answer, runs_before).await;
            return (verdict, Counting_(store));
        }
    };
    let counts = store.counts();
    assert!(
        counts.failed_completions >= 1,
        "trial {n}: the holder met the fault: {counts:?}"
    );
    let verdict = judge(&caller, store.as_ref(), &input, &answer, runs_before).await;
    (verdict, Counting_(store))
}

/// The counting store of a trial, for its figures.
struct Counting_(Arc<Counting>);

fn tally_trial(tally: &mut Tally, store: &Counting_, verdict: &Verdict) {
    let counts = store.0.counts();
    tally.add_counted(counts.operations, counts.unknown, 1, &verdict.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_failure_after_the_effect_makes_no_second_effect_on_pg_store() {
    let server = tokio::task::spawn_blocking(|| CrashServer::start("f11", NAME))
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
    let proxy = Proxy::start(Upstream::from_dsn(&server.dsn()).unwrap())
        .await
        .unwrap();
    let provider = Arc::new(Provider::start(false).await);
    let mut tallies = [
        Tally::new("F11 store failure after the effect: dispatcher"),
        Tally::new("F11 store failure after the effect: web executor"),
    ];
    let started = Instant::now();
    for n in 0..report::trials(2) {
        for fault in [
            Fault11::LostReply,
            Fault11::Stopped,
            Fault11::CrashMidCompletion,
        ] {
            for (i, front) in [Front::Dispatcher, Front::Web].into_iter().enumerate() {
                let t = Instant::now();
                let (verdict, store) =
                    pg_trial(&server, &proxy, &ledger_dsn, &provider, front, fault, n).await;
                tally_trial(&mut tallies[i], &store, &verdict);
                eprintln!(
                    "trial {n} {fault:?} {front:?}: {:?}, {:?}",
                    store.0.counts(),
                    t.elapsed()
                );
                verdict.assert_clean(&format!("trial {n}, {fault:?}, {front:?}"));
            }
        }
    }
    eprintln!("F11 on PgStore: {:?}", started.elapsed());
    for t in &tallies {
        t.close(&server.dsn(), "").await;
    }
    drop(proxy);
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&format!("{NAME}_ledger"));
        drop(server);
    })
    .await
    .unwrap();
}

/// The Redis faults of F11.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RedisFault {
    /// SIGSTOP between the run and the completion, SIGCONT once a completion timed out.
    Paused,
    /// Killed and started again (its append-only file reloaded) between the run and the
    /// completion, once a completion failed.
    Restarted,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_failure_after_the_effect_makes_no_second_effect_on_redis_store() {
    let Some(redis) = PrivateRedis::start("f11") else {
        return;
    };
    let redis = Arc::new(std::sync::Mutex::new(redis));
    let url = redis.lock().unwrap().url();
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
    let provider = Arc::new(Provider::start(false).await);
    let mut tallies = [
        Tally::new("F11 store failure after the effect: dispatcher"),
        Tally::new("F11 store failure after the effect: web executor"),
    ];
    let client = redis::Client::open(url.as_str()).unwrap();
    for n in 0..report::trials(2) {
        for fault in [RedisFault::Paused, RedisFault::Restarted] {
            for (i, front) in [Front::Dispatcher, Front::Web].into_iter().enumerate() {
                // A store that connects again after its connection broke, with a bound on
                // every answer (a paused server never answers).
                let config = redis::AsyncConnectionConfig::new()
                    .set_response_timeout(Duration::from_millis(500))
                    .set_connection_timeout(Duration::from_millis(500));
                let redis_store = RedisStore::connect(
                    client.clone(),
                    config,
                    format!("{}:", suite::scope("f11")),
                )
                .await
                .unwrap();
                let store = Counting::new(Arc::new(redis_store));
                let caller = Arc::new(Caller::new(front, store.clone(), &ledger_dsn, &provider));
                let input = json!({"trial": n, "fault": format!("{fault:?}")});
                let runs_before = runs_of(&caller);
                caller.hold_after_effect();
                let c = caller.clone();
                let i_ = input.clone();
                let task = tokio::spawn(async move { c.call(&i_).await });
                caller.held().await;
                match fault {
                    RedisFault::Paused => {
                        redis.lock().unwrap().signal("STOP");
                        caller.release();
                        store
                            .until("a completion times out on the paused server", |c| {
                                c.failed_completions >= 1
                            })
                            .await;
                        redis.lock().unwrap().signal("CONT");
                    }
                    RedisFault::Restarted => {
                        let r = redis.clone();
                        tokio::task::spawn_blocking(move || r.lock().unwrap().kill())
                            .await
                            .unwrap();
                        caller.release();
                        store
                            .until("a completion fails while the server is down", |c| {
                                c.failed_completions >= 1
                            })
                            .await;
                        let r = redis.clone();
                        tokio::task::spawn_blocking(move || r.lock().unwrap().launch())
                            .await
                            .unwrap();
                    }
                }
                let answer = task.await.unwrap();
                let caller = Arc::try_unwrap(caller).ok().expect("the call has ended");
                let verdict = judge(&caller, store.as_ref(), &input, &answer, runs_before).await;
                let counts = store.counts();
                tallies[i].add_counted(counts.operations, counts.unknown, 1, &verdict.violations);
                eprintln!("trial {n} {fault:?} {front:?}: {counts:?}");
                verdict.assert_clean(&format!("trial {n}, {fault:?}, {front:?} on RedisStore"));
            }
        }
    }
    let version = redis.lock().unwrap().version();
    for t in &tallies {
        t.write("RedisStore", &version);
    }
    drop(redis);
    tokio::task::spawn_blocking(move || suite::drop_database(&ledger_db))
        .await
        .unwrap();
}
