//! The tool dispatcher over every store: a tool's side effect runs once however often the
//! call is repeated.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::*;
use async_trait::async_trait;
use pg_idempotency_client::*;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

/// How long a test waits for something it is sure will happen before calling it a failure.
const BOUND: Duration = Duration::from_secs(10);

/// How the test sees and steers a send_email run: it is told when a run begins and when a
/// run is dropped unfinished, and a held run sends nothing until the test lets it go on.
#[derive(Clone, Default)]
struct Steer {
    began: Arc<Notify>,
    hold: Option<Arc<Notify>>,
    dropped: Arc<Notify>,
}

impl Steer {
    /// Runs go straight through.
    fn free() -> Steer {
        Steer::default()
    }
    /// Each run waits for a `go_on` before it sends.
    fn held() -> Steer {
        Steer {
            hold: Some(Arc::default()),
            ..Steer::default()
        }
    }
    /// Lets one held run (the current one or the next) go on.
    fn go_on(&self) {
        self.hold.as_ref().expect("a held Steer").notify_one();
    }
    async fn run_began(&self) {
        tokio::time::timeout(BOUND, self.began.notified())
            .await
            .expect("the tool never ran");
    }
    async fn run_dropped(&self) {
        tokio::time::timeout(BOUND, self.dropped.notified())
            .await
            .expect("the tool's run was never dropped: it is still running");
    }
}

/// Tells `dropped` when the run it lives in is dropped before its end disarms it.
struct DropAlarm(Option<Arc<Notify>>);

impl Drop for DropAlarm {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            dropped.notify_one();
        }
    }
}

/// A send_email tool that counts the emails it sends.
fn send_email(sent: Arc<AtomicU32>, steer: &Steer) -> Arc<dyn Tool> {
    let steer = steer.clone();
    tool_fn(move |input: Value| {
        let (sent, steer) = (sent.clone(), steer.clone());
        async move {
            let mut alarm = DropAlarm(Some(steer.dropped.clone()));
            steer.began.notify_one();
            if let Some(hold) = &steer.hold {
                hold.notified().await;
            }
            alarm.0 = None;
            if input["to"] == "bounce@example.com" {
                return Err(ToolError {
                    kind: ErrorKind::ToolFailed,
                    message: "mailbox full".into(),
                    response: Some(json!({"error": "bounced"})),
                    retryable: true,
                    retry_after: None,
                    record: Default::default(),
                });
            }
            let n = sent.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(json!({"email_id": n}))
        }
    })
}

fn dispatcher(
    store: Arc<dyn IdempotencyStore>,
    tool: &str,
    sent: Arc<AtomicU32>,
    policy: Idempotent,
    steer: &Steer,
) -> Dispatcher {
    let d = Dispatcher::new(store);
    d.register(ToolSpec::new(tool, send_email(sent, steer)).idempotent(policy))
        .unwrap();
    d
}

/// Waits until the lease of (scope, key) has lapsed, as its record shows: the record's
/// lease_until is read again after each nap, since a heartbeat may have moved it.
async fn lease_lapsed(store: &dyn IdempotencyStore, scope: &str, key: &str) {
    let lapsed = async {
        loop {
            let rec = store
                .lookup(scope, key)
                .await
                .unwrap()
                .expect("the claim's record");
            let until = rec.lease_until.expect("an in-progress record has a lease");
            match until.duration_since(SystemTime::now()) {
                Ok(left) => tokio::time::sleep(left + Duration::from_millis(1)).await,
                Err(_) => return,
            }
        }
    };
    tokio::time::timeout(BOUND, lapsed)
        .await
        .expect("the lease never lapsed");
}

async fn three_retries_send_one_email(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = dispatcher(
        store,
        &tool,
        sent.clone(),
        Idempotent::default(),
        &Steer::free(),
    );
    let input = json!({"to": "ann@example.com", "subject": "Welcome"});
    assert_eq!(
        d.dispatch(&tool, input.clone()).await.unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
    for _ in 0..2 {
        assert_eq!(
            d.dispatch(&tool, input.clone()).await.unwrap(),
            Dispatched::Replayed(json!({"email_id": 1}))
        );
    }
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

/// The next answer a spawned dispatch sent on `answered`.
async fn next_answer(answered: &mut mpsc::UnboundedReceiver<Result<Dispatched>>) -> Dispatched {
    tokio::time::timeout(BOUND, answered.recv())
        .await
        .expect("a dispatch never answered")
        .expect("a dispatch task ended without answering")
        .unwrap()
}

async fn concurrent_dispatches_run_once(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    // The run that claims the call is held until every other call has been answered, so
    // all eight are in flight together.
    let steer = Steer::held();
    let d = Arc::new(dispatcher(
        store,
        &tool,
        sent.clone(),
        Idempotent::default(),
        &steer,
    ));
    let (answers, mut answered) = mpsc::unbounded_channel();
    for _ in 0..8 {
        let (d, tool, answers) = (d.clone(), tool.clone(), answers.clone());
        tokio::spawn(async move {
            let _ = answers.send(d.dispatch(&tool, json!({"to": "ann@example.com"})).await);
        });
    }
    for _ in 0..7 {
        let answer = next_answer(&mut answered).await;
        assert!(
            matches!(answer, Dispatched::InProgress { .. }),
            "a repeat of a running call was answered {answer:?}"
        );
    }
    steer.go_on();
    assert_eq!(
        next_answer(&mut answered).await,
        Dispatched::Ran(json!({"email_id": 1}))
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

async fn failures_rerun_unless_cached(store: Arc<dyn IdempotencyStore>) {
    let bounce = json!({"to": "bounce@example.com"});
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        Idempotent::default(),
        &Steer::free(),
    );
    for _ in 0..2 {
        let e = d.dispatch(&tool, bounce.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ToolFailed);
        // The tool's own message: it ran again (a replay says "remembered").
        assert_eq!(e.message, "mailbox full");
        assert!(!e.replayed());
        assert_eq!(e.response(), Some(&json!({"error": "bounced"})));
    }
    // Cached failures are replayed, not rerun (the replay says so).
    let cached = Idempotent {
        cache_failures: Some(true),
        ..Idempotent::default()
    };
    let tool2 = unique("send_email");
    let d2 = dispatcher(
        store.clone(),
        &tool2,
        sent.clone(),
        cached.clone(),
        &Steer::free(),
    );
    assert_eq!(
        d2.dispatch(&tool2, bounce.clone())
            .await
            .unwrap_err()
            .message,
        "mailbox full"
    );
    assert!(d2
        .dispatch(&tool2, bounce.clone())
        .await
        .unwrap_err()
        .message
        .contains("remembered"));
    // fail_fast refuses the repeat; return_cached_if_success reruns the failure.
    let tool3 = unique("send_email");
    let ff = Idempotent {
        on_cache_hit: Some(OnCacheHit::FailFast),
        ..cached.clone()
    };
    let d3 = dispatcher(store.clone(), &tool3, sent.clone(), ff, &Steer::free());
    d3.dispatch(&tool3, bounce.clone()).await.unwrap_err();
    assert_eq!(
        d3.dispatch(&tool3, bounce.clone()).await.unwrap_err().kind,
        ErrorKind::RepeatRefused
    );
    let tool4 = unique("send_email");
    let rerun = Idempotent {
        on_cache_hit: Some(OnCacheHit::ReturnCachedIfSuccess),
        ..cached
    };
    let d4 = dispatcher(store, &tool4, sent, rerun, &Steer::free());
    assert_eq!(
        d4.dispatch(&tool4, bounce.clone())
            .await
            .unwrap_err()
            .message,
        "mailbox full"
    );
    assert_eq!(
        d4.dispatch(&tool4, bounce).await.unwrap_err().message,
        "mailbox full"
    );
}

/// The Java framework's create_issue: "Same title, same issue: body edits do not create a second
/// one." An Explicit key names the call alone; a tool opts into comparing more.
async fn explicit_keys(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("create_issue"), Arc::new(AtomicU32::new(0)));
    let by_title = Idempotent::new().key_supplier(|v| v["title"].as_str().map(str::to_string));
    let d = dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        by_title.clone(),
        &Steer::free(),
    );
    let mut answers = Vec::new();
    for body in ["a", "b", "c"] {
        answers.push(
            d.dispatch(&tool, json!({"title": "Crash", "body": body}))
                .await
                .unwrap(),
        );
    }
    assert_eq!(sent.load(Ordering::SeqCst), 1, "one issue for three bodies");
    assert!(matches!(answers[0], Dispatched::Ran(_)), "{answers:?}");
    for later in &answers[1..] {
        assert_eq!(
            later,
            &Dispatched::Replayed(json!({"email_id": 1})),
            "a body edit replays the first call"
        );
    }
    assert_eq!(
        d.dispatch(&tool, json!({"title": " ", "body": "b"}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::InvalidArgument
    );

    // Opting in: the body is compared (a JSON pointer), other fields are not.
    let (tool, sent) = (unique("create_issue"), Arc::new(AtomicU32::new(0)));
    let body_too = by_title
        .clone()
        .fingerprint(Fingerprint::Fields(vec!["/body".into()]));
    let d = dispatcher(store.clone(), &tool, sent.clone(), body_too, &Steer::free());
    d.dispatch(&tool, json!({"title": "Crash", "body": "a", "label": "x"}))
        .await
        .unwrap();
    assert_eq!(
        d.dispatch(&tool, json!({"title": "Crash", "body": "a", "label": "y"}))
            .await
            .unwrap(),
        Dispatched::Replayed(json!({"email_id": 1}))
    );
    let e = d
        .dispatch(&tool, json!({"title": "Crash", "body": "b"}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch, "{e:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    // A field that is not a JSON pointer is refused at registration, not ignored.
    let e = Dispatcher::new(store.clone())
        .register(
            ToolSpec::new(
                unique("create_issue"),
                send_email(Arc::new(AtomicU32::new(0)), &Steer::free()),
            )
            .idempotent(Idempotent::new().fingerprint(Fingerprint::Fields(vec!["body".into()]))),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
    assert!(e.detail().is_some() && e.hint().is_some(), "{e:?}");

    // The whole input, as HashInput compares it.
    let (tool, sent) = (unique("create_issue"), Arc::new(AtomicU32::new(0)));
    let whole = by_title.fingerprint(Fingerprint::WholeInput);
    let d = dispatcher(store, &tool, sent.clone(), whole, &Steer::free());
    d.dispatch(&tool, json!({"title": "Crash", "body": "a"}))
        .await
        .unwrap();
    assert_eq!(
        d.dispatch(&tool, json!({"title": "Crash", "body": "b"}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Mismatch
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

/// Whether a backend of the test database is waiting inside idem_begin (the extension's
/// wait event, or the PL/pgSQL variant's pg_sleep). Only this test waits in this suite.
async fn a_session_waits_in_idem_begin(client: &deadpool_postgres::Object) -> bool {
    // Unnamed (query_typed): it runs through a pooler in transaction mode too.
    client
        .query_typed(
            "SELECT count(*) > 0 FROM pg_stat_activity
             WHERE datname = current_database() AND query LIKE '%idem_begin%'
               AND wait_event IN ('Extension', 'PgSleep') AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()[0]
        .get(0)
}

/// A duplicate that arrives while the call runs waits (`Idempotent::wait`) and returns the
/// first call's result, without running the tool again.
async fn a_duplicate_waits_for_the_running_call(store: Arc<dyn IdempotencyStore>, kind: &str) {
    let (tool, sent, steer) = (
        unique("send_email"),
        Arc::new(AtomicU32::new(0)),
        Steer::held(),
    );
    let waiting = Idempotent::new().wait(BOUND);
    let d = Arc::new(dispatcher(store, &tool, sent.clone(), waiting, &steer));
    let input = json!({"to": "ann@example.com"});
    let first = {
        let (d, tool, input) = (d.clone(), tool.clone(), input.clone());
        tokio::spawn(async move { d.dispatch(&tool, input).await })
    };
    steer.run_began().await;
    // On PostgreSQL the duplicate comes from elsewhere (a store over a pool of its own: not
    // this process's holder as far as the client can tell), so that it waits in the
    // server; a duplicate through the same pool waits for this process's holder instead
    // (holder.rs, `a_retry_in_the_holders_process_joins_it`).
    let from = match kind {
        "postgres" => Arc::new(dispatcher(
            Arc::new(pg_store(pool())),
            &tool,
            sent.clone(),
            Idempotent::new().wait(BOUND),
            &Steer::free(),
        )),
        _ => d.clone(),
    };
    let mut duplicate = Box::pin({
        let tool = tool.clone();
        async move { from.dispatch(&tool, input).await }
    });
    // The duplicate must be waiting before the first call ends, as the store shows it.
    match kind {
        // No I/O: the first time the duplicate is not ready, it waits on the store.
        "memory" => {
            let polled = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(duplicate.as_mut().poll(cx).is_pending())
            })
            .await;
            assert!(polled, "the duplicate answered while the call ran");
        }
        "postgres" => {
            let (tx, mut rx) = tokio::sync::oneshot::channel();
            let driven = tokio::spawn(async move {
                let _ = tx.send(duplicate.await);
            });
            let watcher = pool().get().await.unwrap();
            let seen = tokio::time::timeout(BOUND, async {
                while !a_session_waits_in_idem_begin(&watcher).await {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            assert!(seen.is_ok(), "the duplicate never waited in idem_begin");
            assert!(
                rx.try_recv().is_err(),
                "the duplicate answered while the call ran"
            );
            steer.go_on();
            let answer = tokio::time::timeout(BOUND, rx).await.unwrap().unwrap();
            driven.await.unwrap();
            assert_eq!(
                answer.unwrap(),
                Dispatched::Replayed(json!({"email_id": 1}))
            );
            assert_eq!(
                first.await.unwrap().unwrap(),
                Dispatched::Ran(json!({"email_id": 1}))
            );
            assert_eq!(sent.load(Ordering::SeqCst), 1);
            return;
        }
        other => unreachable!("{other}"),
    }
    steer.go_on();
    let answer = tokio::time::timeout(BOUND, duplicate).await.unwrap();
    assert_eq!(
        answer.unwrap(),
        Dispatched::Replayed(json!({"email_id": 1}))
    );
    assert_eq!(
        first.await.unwrap().unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the tool ran once");
}

/// The same over RedisStore: the duplicate comes through a second dispatcher (another
/// process of the same service) whose store has a connection of its own, so the server's
/// `CLIENT LIST` shows that connection's last command: once it is `evalsha` (the begin
/// script), the duplicate has read the running claim and polls again after a pause.
#[cfg(feature = "redis")]
async fn a_duplicate_waits_for_the_running_call_on_redis() {
    let Some(url) = redis_url() else {
        return;
    };
    let (client, watcher) = redis_connection(&url).await;
    let prefix = unique("idem") + ":";
    let (tool, sent, steer) = (
        unique("send_email"),
        Arc::new(AtomicU32::new(0)),
        Steer::held(),
    );
    let waiting = Idempotent::new().wait(BOUND);
    let own = |c: ::redis::aio::MultiplexedConnection| -> Arc<dyn IdempotencyStore> {
        Arc::new(RedisStore::new(c, prefix.clone()))
    };
    let first_d = dispatcher(
        own(watcher.clone()),
        &tool,
        sent.clone(),
        waiting.clone(),
        &steer,
    );
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let id: i64 = ::redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut conn)
        .await
        .unwrap();
    let second_d = dispatcher(own(conn), &tool, sent.clone(), waiting, &steer);
    let input = json!({"to": "ann@example.com"});
    let first = {
        let (tool, input) = (tool.clone(), input.clone());
        tokio::spawn(async move { first_d.dispatch(&tool, input).await })
    };
    steer.run_began().await;
    let duplicate = {
        let tool = tool.clone();
        tokio::spawn(async move { second_d.dispatch(&tool, input).await })
    };
    let seen = tokio::time::timeout(BOUND, async {
        loop {
            let info: String = ::redis::cmd("CLIENT")
                .arg("LIST")
                .arg("ID")
                .arg(id)
                .query_async(&mut watcher.clone())
                .await
                .unwrap();
            if info.split_whitespace().any(|f| f == "cmd=evalsha") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(seen.is_ok(), "the duplicate never ran its begin script");
    assert!(
        !duplicate.is_finished(),
        "the duplicate answered while the call ran"
    );
    steer.go_on();
    let answer = tokio::time::timeout(BOUND, duplicate)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        answer.unwrap(),
        Dispatched::Replayed(json!({"email_id": 1}))
    );
    assert_eq!(
        first.await.unwrap().unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the tool ran once");
}

/// A tool that runs for several leases keeps its claim: the dispatcher's heartbeat extends
/// the lease, a duplicate meanwhile is told the call is in progress, and nobody takes over.
async fn a_heartbeat_keeps_a_long_call(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent, steer) = (
        unique("long_export"),
        Arc::new(AtomicU32::new(0)),
        Steer::held(),
    );
    // Beats every half second; a beat may come up to a second late on a loaded machine
    // before the lease lapses.
    let lease = Duration::from_millis(1500);
    let policy = Idempotent::new()
        .key_supplier(|v| v["job"].as_str().map(str::to_string))
        .lease(lease);
    let d = Arc::new(dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        policy,
        &steer,
    ));
    let input = json!({"job": "export-1"});
    let first = {
        let (d, tool, input) = (d.clone(), tool.clone(), input.clone());
        tokio::spawn(async move { d.dispatch(&tool, input).await })
    };
    steer.run_began().await;
    let claimed = store.lookup(&tool, "export-1").await.unwrap().unwrap();
    let first_until = claimed.lease_until.unwrap();
    // Until the lease has been pushed two leases past the first one's end (so the call has
    // outlived three leases), every look finds the first attempt holding it.
    let outlived = tokio::time::timeout(BOUND, async {
        loop {
            let rec = store.lookup(&tool, "export-1").await.unwrap().unwrap();
            assert_eq!(rec.state, State::InProgress);
            assert_eq!(rec.attempt, 1, "the call was taken over while it ran");
            if rec.lease_until.unwrap() >= first_until + 2 * lease {
                return;
            }
            // A duplicate asks the store itself: through the dispatcher, a takeover would
            // run the held tool and wait with it, and this loop would only time out.
            let dup = BeginOptions::default();
            match store.begin(&tool, "export-1", &dup).await.unwrap() {
                Begin::InProgress(_) => {}
                other => panic!(
                    "a duplicate was answered {other:?}: the lease lapsed while the call ran"
                ),
            }
            // Waits for the next heartbeat: the record's lease end moves.
            let seen = rec.lease_until;
            while store
                .lookup(&tool, "export-1")
                .await
                .unwrap()
                .unwrap()
                .lease_until
                == seen
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
    .await;
    assert!(
        outlived.is_ok(),
        "the lease was never extended past two leases"
    );
    steer.go_on();
    assert_eq!(
        first.await.unwrap().unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
    let rec = store.lookup(&tool, "export-1").await.unwrap().unwrap();
    assert_eq!((rec.state, rec.attempt), (State::Succeeded, 1));
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

async fn a_crashed_holder_is_taken_over(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let input = json!({"to": "ann@example.com"});
    // A process claimed the call and died: its lease lapses.
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let o = BeginOptions {
        request: Some(input.clone()),
        lease: Some(Duration::from_millis(100)),
        ..BeginOptions::default()
    };
    let Begin::Claimed(first) = store.begin(&tool, &key, &o).await.unwrap() else {
        panic!("no claim")
    };
    lease_lapsed(&*store, &tool, &key).await;
    let d = dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        Idempotent::default(),
        &Steer::free(),
    );
    assert!(matches!(
        d.dispatch(&tool, input).await.unwrap(),
        Dispatched::Ran(_)
    ));
    let rec = store.lookup(&tool, &key).await.unwrap().unwrap();
    assert_eq!((rec.attempt, rec.upstream_key), (2, first.upstream_key));
}

async fn a_timeout_covers_the_tool(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    // The run is held: only the timeout can end it. The lease is long enough for the repeat
    // below to find it live, short enough to wait out.
    let steer = Steer::held();
    // The timeout must outlast the claim on a loaded machine (else it fires before the tool
    // ran, and nothing is held); the lease must outlast the timeout and the repeat after it.
    let quick = Idempotent {
        timeout: Some(Duration::from_millis(1500)),
        lease: Some(Duration::from_secs(6)),
        ..Idempotent::default()
    };
    let d = Arc::new(dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        quick,
        &steer,
    ));
    let input = json!({"to": "ann@example.com"});
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let timed_out = tokio::spawn({
        let (d, tool, input) = (d.clone(), tool.clone(), input.clone());
        async move { tokio::time::timeout(BOUND, d.dispatch(&tool, input)).await }
    });
    // The tool ran (it was claimed), and the timeout stopped it: its run was dropped
    // before it sent anything.
    steer.run_began().await;
    steer.run_dropped().await;
    let timed_out = timed_out
        .await
        .unwrap()
        .expect("the tool's timeout never fired");
    assert_eq!(timed_out.unwrap_err().kind, ErrorKind::Timeout);
    assert_eq!(sent.load(Ordering::SeqCst), 0, "the timed-out tool sent");
    // As the timeout's error says, the claim stays held until its lease lapses: a repeat
    // meanwhile is told the call is in progress and does not run it ...
    let held = store.lookup(&tool, &key).await.unwrap().expect("the claim");
    assert_eq!((held.state, held.attempt), (State::InProgress, 1));
    assert!(matches!(
        d.dispatch(&tool, input.clone()).await.unwrap(),
        Dispatched::InProgress { .. }
    ));
    // ... and once it lapsed, a retry takes the call over and runs it to its end.
    lease_lapsed(&*store, &tool, &key).await;
    steer.go_on();
    assert_eq!(
        d.dispatch(&tool, input).await.unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
    let done = store
        .lookup(&tool, &key)
        .await
        .unwrap()
        .expect("the result");
    assert_eq!((done.state, done.attempt), (State::Succeeded, 2));
}

/// A store whose begin never answers, to show a tool's timeout covers store calls too.
struct Stalled(Arc<dyn IdempotencyStore>);

#[async_trait]
impl IdempotencyStore for Stalled {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, forget, metrics, identity, joins_live_holders, admit_joined_wait,
    // durable, api_schema, statement_mode.
    async fn begin(&self, _: &str, _: &str, _: &BeginOptions) -> Result<Begin> {
        std::future::pending().await
    }
    async fn complete(
        &self,
        s: &str,
        k: &str,
        f: i64,
        r: Option<&Value>,
        ok: bool,
        c: Option<bool>,
    ) -> Result<Completed> {
        self.0.complete(s, k, f, r, ok, c).await
    }
    async fn release(&self, s: &str, k: &str, f: i64) -> Result<()> {
        self.0.release(s, k, f).await
    }
    async fn extend(
        &self,
        s: &str,
        k: &str,
        f: i64,
        l: Option<Duration>,
    ) -> Result<std::time::SystemTime> {
        self.0.extend(s, k, f, l).await
    }
    async fn lookup(&self, s: &str, k: &str) -> Result<Option<Record>> {
        self.0.lookup(s, k).await
    }
    async fn purge(&self) -> Result<u64> {
        self.0.purge().await
    }
}

async fn a_timeout_covers_a_slow_store(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let quick = Idempotent {
        timeout: Some(Duration::from_millis(100)),
        ..Idempotent::default()
    };
    let d = dispatcher(Arc::new(Stalled(store)), &tool, sent, quick, &Steer::free());
    let dispatched =
        tokio::time::timeout(BOUND, d.dispatch(&tool, json!({"to": "ann@example.com"})))
            .await
            .expect("the timeout did not cover the store's begin");
    assert_eq!(dispatched.unwrap_err().kind, ErrorKind::Timeout);
}

async fn retries_wait_out_a_running_call(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let steer = Steer::held();
    let d = Arc::new(dispatcher(
        store,
        &tool,
        sent.clone(),
        Idempotent::default(),
        &steer,
    ));
    let first = {
        let (d, tool) = (d.clone(), tool.clone());
        tokio::spawn(async move { d.dispatch(&tool, json!({"n": 1})).await })
    };
    // The first call holds the claim and runs: a repeat now is told so ...
    steer.run_began().await;
    assert!(matches!(
        d.dispatch(&tool, json!({"n": 1})).await.unwrap(),
        Dispatched::InProgress { .. }
    ));
    // ... and retries wait until it finished, then replay its result.
    steer.go_on();
    let retry = Retry {
        attempts: 10,
        base: Duration::from_millis(50),
        max: Duration::from_millis(200),
        ..Retry::default()
    };
    let got = retry
        .run(|| async {
            Ok(match d.dispatch(&tool, json!({"n": 1})).await? {
                Dispatched::InProgress { .. } => Attempt::Again {
                    after: Some(Duration::from_millis(50)),
                },
                done => Attempt::Done(done),
            })
        })
        .await
        .unwrap();
    assert_eq!(got, Dispatched::Replayed(json!({"email_id": 1})));
    assert_eq!(
        first.await.unwrap().unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[test]
fn a_required_tool_without_protection_is_refused_at_registration() {
    let d = Dispatcher::new(Arc::new(MemoryStore::new()));
    let sent = Arc::new(AtomicU32::new(0));
    for strategy in [KeyStrategy::Uuid, KeyStrategy::None] {
        let spec = ToolSpec::new("charge_card", send_email(sent.clone(), &Steer::free()))
            .required()
            .idempotent(Idempotent::new().strategy(strategy));
        assert_eq!(
            d.register(spec).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
    }
    let zero = ToolSpec::new("charge_card", send_email(sent.clone(), &Steer::free()))
        .required()
        .idempotent(Idempotent {
            ttl: Some(Duration::ZERO),
            ..Idempotent::default()
        });
    assert_eq!(
        d.register(zero).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    // Required without any settings: nothing would deduplicate it.
    let bare = ToolSpec::new("charge_card", send_email(sent.clone(), &Steer::free())).required();
    let e = d.register(bare).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(
        e.detail().is_some_and(|d| d.contains("no settings")),
        "{e:?}"
    );
    assert!(e.hint().is_some(), "{e:?}");
    // Not declared Required, a tool without settings registers (and runs unprotected).
    assert!(d
        .register(ToolSpec::new(
            "notify",
            send_email(sent.clone(), &Steer::free())
        ))
        .is_ok());
    // Without a side effect, nothing needs protecting.
    let read_only = ToolSpec::new("search", send_email(sent, &Steer::free()))
        .side_effect(false)
        .idempotent(Idempotent::new().strategy(KeyStrategy::None));
    assert!(d.register(read_only).is_ok());
}

macro_rules! suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            async fn store() -> Option<Arc<dyn IdempotencyStore>> {
                $make
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn three_retries() {
                if let Some(s) = store().await {
                    three_retries_send_one_email(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent() {
                if let Some(s) = store().await {
                    concurrent_dispatches_run_once(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn failures() {
                if let Some(s) = store().await {
                    failures_rerun_unless_cached(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn explicit() {
                if let Some(s) = store().await {
                    explicit_keys(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn takeover() {
                if let Some(s) = store().await {
                    a_crashed_holder_is_taken_over(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn timeout_tool() {
                if let Some(s) = store().await {
                    a_timeout_covers_the_tool(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn timeout_store() {
                if let Some(s) = store().await {
                    a_timeout_covers_a_slow_store(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn wait() {
                let kind = stringify!($store);
                if let Some(s) = store().await {
                    #[cfg(feature = "redis")]
                    if kind == "redis" {
                        drop(s);
                        return a_duplicate_waits_for_the_running_call_on_redis().await;
                    }
                    a_duplicate_waits_for_the_running_call(s, kind).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn heartbeat() {
                if let Some(s) = store().await {
                    a_heartbeat_keeps_a_long_call(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn retries() {
                if let Some(s) = store().await {
                    retries_wait_out_a_running_call(s).await
                }
            }
        }
    };
}

suite!(memory, Some(Arc::new(MemoryStore::new())));
#[cfg(feature = "redis")]
suite!(redis, redis_store().await);
suite!(postgres, Some(Arc::new(pg_store(pool()))));

/// A scope's policy set in SQL (`idem_set_policy`) governs calls made through the
/// dispatcher, whose unset settings are not sent; a tool's own setting beats the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_scope_policy_in_the_database_governs_the_dispatcher() {
    let admin = pool().get().await.unwrap();
    let store: Arc<dyn IdempotencyStore> = Arc::new(pg_store(pool()));
    let bounce = json!({"to": "bounce@example.com"});
    let set_policy = |scope: String| {
        let admin = &admin;
        async move {
            admin
                .query_typed(
                    "SELECT idem_set_policy($1, ttl => '2 hours', cache_failures => true)",
                    &[(&scope, tokio_postgres::types::Type::TEXT)],
                )
                .await
                .unwrap();
        }
    };

    // The policy caches failures: a repeat gets the remembered failure, the tool does not
    // run again.
    let tool = unique("charge_card");
    set_policy(tool.clone()).await;
    let d = dispatcher(
        store.clone(),
        &tool,
        Arc::new(AtomicU32::new(0)),
        Idempotent::default(),
        &Steer::free(),
    );
    assert_eq!(
        d.dispatch(&tool, bounce.clone()).await.unwrap_err().message,
        "mailbox full"
    );
    let again = d.dispatch(&tool, bounce.clone()).await.unwrap_err();
    assert_eq!(again.kind, ErrorKind::ToolFailed);
    assert!(again.replayed(), "{again:?}");
    assert!(again.message.ends_with("(remembered)"), "{again:?}");
    // And its ttl: the record is kept two hours, not the server's default hour.
    let rec = store
        .lookup(
            &tool,
            &pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&bounce).unwrap()),
        )
        .await
        .unwrap()
        .expect("the cached failure");
    let kept = rec
        .expires_at
        .duration_since(rec.completed_at.unwrap())
        .unwrap();
    assert!(kept > Duration::from_secs(7000), "kept for {kept:?}");

    // The tool's own setting beats the policy: its failures are not cached.
    let tool = unique("charge_card");
    set_policy(tool.clone()).await;
    let own = Idempotent {
        cache_failures: Some(false),
        ..Idempotent::default()
    };
    let d = dispatcher(
        store.clone(),
        &tool,
        Arc::new(AtomicU32::new(0)),
        own,
        &Steer::free(),
    );
    for _ in 0..2 {
        assert_eq!(
            d.dispatch(&tool, bounce.clone()).await.unwrap_err().message,
            "mailbox full",
            "the tool ran again"
        );
    }
}
