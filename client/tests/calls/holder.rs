//! What becomes of a claimed call, over every store: its result is recorded although the
//! store blinks, a result the store cannot keep is marked so that no retry runs it again,
//! a lost lease reaches the running tool, and a takeover of a call whose earlier attempt
//! may have acted follows the tool's choice. Also: a tool without settings runs every
//! time, and two tools' equal keys never meet.
//!
//! The store blinks through `Blinking`, a wrapper over the real store that fails chosen
//! calls the way a lost connection does (the call may or may not have been carried out);
//! the fault suite (tests/faults) does the same with a real proxy and real server stops.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::*;
use async_trait::async_trait;
use pg_idempotency_client::*;
use pg_idempotency_tests::{until_async, Deadline};
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};

/// How long a test waits for something it is sure will happen.
const BOUND: Duration = Duration::from_secs(20);

/// A real store whose `complete` and `extend` can be made to fail or to wait.
struct Blinking {
    inner: Arc<dyn IdempotencyStore>,
    /// Completions still to fail; each is carried out first when `after_commit`.
    failing_completions: AtomicU32,
    after_commit: bool,
    /// While set, completions fail without reaching the store.
    down: AtomicBool,
    /// While set, the heartbeat fails too: the store is out of reach for the holder (its
    /// lease lapses), while `begin` still gets through (a retry would reach the store).
    cut: AtomicBool,
    /// Extensions wait for a permit (none: they wait until the test adds some).
    extend_gate: Option<Arc<Semaphore>>,
    completions: AtomicU32,
}

impl Blinking {
    fn over(inner: Arc<dyn IdempotencyStore>) -> Blinking {
        Blinking {
            inner,
            failing_completions: AtomicU32::new(0),
            after_commit: false,
            down: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            extend_gate: None,
            completions: AtomicU32::new(0),
        }
    }
}

fn lost_connection() -> Error {
    // What PgStore answers when the connection breaks mid-call.
    Error::new(ErrorKind::Database, "connection closed (test)")
}

#[async_trait]
impl IdempotencyStore for Blinking {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, metrics, identity, joins_live_holders, admit_joined_wait, api_schema,
    // statement_mode.
    async fn begin(&self, s: &str, k: &str, o: &BeginOptions) -> Result<Begin> {
        self.inner.begin(s, k, o).await
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
        self.completions.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) || self.cut.load(Ordering::SeqCst) {
            return Err(lost_connection());
        }
        let failing = self
            .failing_completions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            if self.after_commit {
                self.inner.complete(s, k, f, r, ok, c).await?;
            }
            return Err(lost_connection());
        }
        self.inner.complete(s, k, f, r, ok, c).await
    }
    async fn release(&self, s: &str, k: &str, f: i64) -> Result<()> {
        self.inner.release(s, k, f).await
    }
    async fn extend(&self, s: &str, k: &str, f: i64, l: Option<Duration>) -> Result<SystemTime> {
        if let Some(gate) = &self.extend_gate {
            let _permit = gate.acquire().await.expect("the gate stays open");
        }
        if self.cut.load(Ordering::SeqCst) {
            return Err(lost_connection());
        }
        self.inner.extend(s, k, f, l).await
    }
    async fn lookup(&self, s: &str, k: &str) -> Result<Option<Record>> {
        self.inner.lookup(s, k).await
    }
    async fn purge(&self) -> Result<u64> {
        self.inner.purge().await
    }
    async fn forget(&self, s: &str, k: &str) -> Result<bool> {
        self.inner.forget(s, k).await
    }
    fn durable(&self) -> bool {
        self.inner.durable()
    }
    // No `identity`: a `Blinking` is a handle of its own, so a dispatcher over the inner
    // store is another process as far as live holders go (the takeovers here need one).
}

/// A send_email tool counting what it sends.
fn counting(sent: Arc<AtomicU32>) -> Arc<dyn Tool> {
    tool_fn(move |_input: Value| {
        let sent = sent.clone();
        async move { Ok(json!({"email_id": sent.fetch_add(1, Ordering::SeqCst) + 1})) }
    })
}

fn hash_key(input: &Value) -> String {
    pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(input).unwrap())
}

/// Waits until `check` holds of the call's record.
async fn until_record(
    store: &dyn IdempotencyStore,
    scope: &str,
    key: &str,
    what: &str,
    check: impl Fn(&Option<Record>) -> bool,
) {
    let check = &check;
    until_async(what, BOUND, || async move {
        check(&store.lookup(scope, key).await.unwrap())
    })
    .await;
}

/// The reply of a completion is lost (after it was carried out), then the store is out of
/// reach for two more tries: the completion is repeated under its fence until answered;
/// the caller gets the tool's result, and a retry replays it. One email.
async fn a_completion_whose_reply_was_lost_is_repeated(store: Arc<dyn IdempotencyStore>) {
    for after_commit in [true, false] {
        let mut blinking = Blinking::over(store.clone());
        blinking.failing_completions = AtomicU32::new(3);
        blinking.after_commit = after_commit;
        let blinking = Arc::new(blinking);
        let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
        let d = Dispatcher::new(blinking.clone());
        d.register(ToolSpec::new(&tool, counting(sent.clone())).idempotent(Idempotent::new()))
            .unwrap();
        let input = json!({"to": "ann@example.com"});
        assert_eq!(
            d.dispatch(&tool, input.clone()).await.unwrap(),
            Dispatched::Ran(json!({"email_id": 1})),
            "after_commit={after_commit}"
        );
        assert_eq!(blinking.completions.load(Ordering::SeqCst), 4);
        let rec = store
            .lookup(&tool, &hash_key(&input))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(rec.state, State::Succeeded);
        assert_eq!(
            d.dispatch(&tool, input).await.unwrap(),
            Dispatched::Replayed(json!({"email_id": 1}))
        );
        assert_eq!(sent.load(Ordering::SeqCst), 1);
    }
}

/// The store stays out of reach after the tool ran, past the dispatch's wait (its lease):
/// the caller gets `Unrecorded` with the tool's result; the holder goes on and records it
/// once the store is back; a retry replays it. One email.
async fn a_result_the_store_cannot_take_yet_is_recorded_later(store: Arc<dyn IdempotencyStore>) {
    let blinking = Arc::new(Blinking::over(store.clone()));
    blinking.down.store(true, Ordering::SeqCst);
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = Dispatcher::new(blinking.clone());
    d.register(
        ToolSpec::new(&tool, counting(sent.clone()))
            .idempotent(Idempotent::new().lease(Duration::from_millis(600))),
    )
    .unwrap();
    let input = json!({"to": "bob@example.com"});
    let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unrecorded, "{e:?}");
    assert_eq!(e.response(), Some(&json!({"email_id": 1})));
    assert!(e.hint().is_some() && e.detail().is_some(), "{e:?}");
    assert!(!e.replayed());
    let key = hash_key(&input);
    // Still claimed (and its lease kept by the heartbeat, which the store takes).
    let held = store.lookup(&tool, &key).await.unwrap().unwrap();
    assert_eq!((held.state, held.attempt), (State::InProgress, 1));
    blinking.down.store(false, Ordering::SeqCst);
    until_record(
        &*store,
        &tool,
        &key,
        "the result recorded in the background",
        |r| r.as_ref().is_some_and(|r| r.state == State::Succeeded),
    )
    .await;
    assert_eq!(
        d.dispatch(&tool, input).await.unwrap(),
        Dispatched::Replayed(json!({"email_id": 1}))
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

/// The holder's store goes out of reach right after the tool ran, past the lease: the
/// caller is told `Unrecorded` (the lease could not be renewed, which the detail says).
/// Retries from the same process, while the store is still out of reach for the holder
/// and after the lease lapsed there (a `begin` would take the call over and run it
/// again), join the holder instead: through the same dispatcher and through another over
/// the same store, they are answered with its result. Once the store is back the holder
/// records it; a retry replays it. One email.
async fn a_retry_in_the_holders_process_joins_it(store: Arc<dyn IdempotencyStore>) {
    let blinking = Arc::new(Blinking::over(store.clone()));
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let lease = Duration::from_millis(600);
    let d = Dispatcher::new(blinking.clone());
    let cut_after_run = {
        let (sent, blinking) = (sent.clone(), blinking.clone());
        tool_fn(move |_input: Value| {
            let (sent, blinking) = (sent.clone(), blinking.clone());
            async move {
                let id = sent.fetch_add(1, Ordering::SeqCst) + 1;
                // The effect happened; the store goes out of reach.
                blinking.cut.store(true, Ordering::SeqCst);
                Ok(json!({"email_id": id}))
            }
        })
    };
    let settings = Idempotent::new().lease(lease);
    d.register(ToolSpec::new(&tool, cut_after_run).idempotent(settings.clone()))
        .unwrap();
    let other = Dispatcher::new(blinking.clone());
    other
        .register(ToolSpec::new(&tool, counting(sent.clone())).idempotent(settings))
        .unwrap();
    let input = json!({"to": "dee@example.com"});
    let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unrecorded, "{e:?}");
    assert_eq!(e.response(), Some(&json!({"email_id": 1})));
    assert!(!e.replayed(), "this call ran the tool: {e:?}");
    let detail = e.detail().unwrap_or_default();
    assert!(
        !detail.contains("lease kept"),
        "the lease was not kept: {detail}"
    );
    let key = hash_key(&input);
    until_record(&*store, &tool, &key, "the lease lapsed", |r| {
        r.as_ref()
            .and_then(|r| r.lease_until)
            .is_some_and(|u| u < SystemTime::now())
    })
    .await;
    for (which, d) in [("the same dispatcher", &d), ("another dispatcher", &other)] {
        let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unrecorded, "{which}: {e:?}");
        assert_eq!(e.response(), Some(&json!({"email_id": 1})), "{which}");
        assert!(
            e.replayed(),
            "{which}: the joined call did not run the tool: {e:?}"
        );
        assert_eq!(sent.load(Ordering::SeqCst), 1, "{which}: ran again");
    }
    blinking.cut.store(false, Ordering::SeqCst);
    until_record(&*store, &tool, &key, "the holder's recording", |r| {
        r.as_ref().is_some_and(|r| r.state == State::Succeeded)
    })
    .await;
    for d in [&d, &other] {
        assert_eq!(
            d.dispatch(&tool, input.clone()).await.unwrap(),
            Dispatched::Replayed(json!({"email_id": 1}))
        );
    }
    let rec = store.lookup(&tool, &key).await.unwrap().unwrap();
    assert_eq!((rec.attempt, sent.load(Ordering::SeqCst)), (1, 1));
}

/// A result the store can never keep (U+0000; over the size limit): the caller gets
/// `Unrecorded` with the result, the record holds a mark as a success, and every retry is
/// told the effect happened (replayed) instead of running it again. A forget lets it run.
async fn an_unstorable_result_is_marked(store: Arc<dyn IdempotencyStore>) {
    let big = "x".repeat(1024 * 1024 + 16);
    for (what, result) in [
        ("U+0000", json!({"v": "a\u{0}b"})),
        ("too large", json!({ "v": big })),
    ] {
        let (tool, runs) = (unique("render"), Arc::new(AtomicU32::new(0)));
        let d = Dispatcher::new(store.clone());
        let counted = runs.clone();
        d.register(
            ToolSpec::new(
                &tool,
                tool_fn(move |_| {
                    let (runs, result) = (counted.clone(), result.clone());
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(result)
                    }
                }),
            )
            .idempotent(Idempotent::new()),
        )
        .unwrap();
        let input = json!({"n": 1});
        let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unrecorded, "{what}: {e:?}");
        assert!(e.response().is_some(), "{what}: the result is handed over");
        let rec = store
            .lookup(&tool, &hash_key(&input))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(rec.state, State::Succeeded, "{what}");
        assert!(
            marks::Mark::of(rec.response.as_ref()).is_some(),
            "{what}: {:?}",
            rec.response
        );
        for _ in 0..2 {
            let again = d.dispatch(&tool, input.clone()).await.unwrap_err();
            assert_eq!(again.kind, ErrorKind::Unrecorded, "{what}: {again:?}");
            assert!(again.replayed(), "{what}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{what}: ran again");
        assert!(store.forget(&tool, &hash_key(&input)).await.unwrap());
        d.dispatch(&tool, input).await.unwrap_err();
        assert_eq!(runs.load(Ordering::SeqCst), 2, "{what}: forgotten, it runs");
    }
}

/// A holder paused past its lease (its heartbeat cannot get through): the tool is told its
/// lease is lost; another dispatcher takes the call over and runs it; once the first
/// holder's heartbeat reaches the store it is refused, and the first dispatch never
/// completes: it answers LeaseLost with its result. The record is the takeover's.
async fn a_lost_lease_reaches_the_tool(store: Arc<dyn IdempotencyStore>) {
    for tool_stops in [true, false] {
        let gate = Arc::new(Semaphore::new(0));
        let mut paused = Blinking::over(store.clone());
        paused.extend_gate = Some(gate.clone());
        let paused = Arc::new(paused);
        let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
        let lease = Duration::from_millis(600);
        let settings = Idempotent::new().lease(lease);
        let (told, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let first = Dispatcher::new(paused.clone());
        let careful = {
            let (sent, told, go_on) = (sent.clone(), told.clone(), go_on.clone());
            tool_fn_with(move |_input, ctx: CallContext| {
                let (sent, told, go_on) = (sent.clone(), told.clone(), go_on.clone());
                async move {
                    ctx.lease_lost().await;
                    assert!(ctx.lease_is_lost());
                    told.notify_one();
                    go_on.notified().await;
                    if tool_stops {
                        ctx.ensure_lease()?;
                    }
                    Ok(json!({"email_id": 100 + sent.fetch_add(1, Ordering::SeqCst)}))
                }
            })
        };
        first
            .register(ToolSpec::new(&tool, careful).idempotent(settings.clone()))
            .unwrap();
        let input = json!({"to": "cy@example.com"});
        let running = tokio::spawn({
            let (tool, input) = (tool.clone(), input.clone());
            async move { first.dispatch(&tool, input).await }
        });
        // The heartbeat waits at the gate until the lease ended: the tool is told.
        tokio::time::timeout(BOUND, told.notified())
            .await
            .expect("the tool was never told its lease was lost");
        // Another process takes the call over and runs it.
        let second = Dispatcher::new(store.clone());
        second
            .register(ToolSpec::new(&tool, counting(sent.clone())).idempotent(settings))
            .unwrap();
        let key = hash_key(&input);
        until_record(&*store, &tool, &key, "the lease lapsed", |r| {
            r.as_ref()
                .and_then(|r| r.lease_until)
                .is_some_and(|u| u < SystemTime::now())
        })
        .await;
        assert_eq!(
            second.dispatch(&tool, input.clone()).await.unwrap(),
            Dispatched::Ran(json!({"email_id": 1}))
        );
        // The paused heartbeat gets through and is refused; the first tool goes on.
        gate.add_permits(1000);
        go_on.notify_one();
        let answer = tokio::time::timeout(BOUND, running)
            .await
            .expect("the first dispatch never answered")
            .unwrap();
        let e = answer.unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::LeaseLost,
            "tool_stops={tool_stops}: {e:?}"
        );
        if tool_stops {
            assert_eq!(
                sent.load(Ordering::SeqCst),
                1,
                "the careful tool stopped short"
            );
        } else {
            // It ignored the warning and acted: its result is handed back, not recorded.
            assert_eq!(e.response(), Some(&json!({"email_id": 101})));
        }
        let rec = store.lookup(&tool, &key).await.unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.attempt, rec.response),
            (State::Succeeded, 2, Some(json!({"email_id": 1})))
        );
    }
}

/// An earlier attempt claimed the call, performed its effect (a row in `ledger`) and died
/// before its completion; its lease lapses. The takeover follows the tool's choice.
async fn an_unknown_outcome_is_a_decision(store: Arc<dyn IdempotencyStore>) {
    for choice in ["rerun", "refuse", "found", "not_found", "unknown"] {
        let (tool, sent) = (unique("charge_card"), Arc::new(AtomicU32::new(0)));
        let input = json!({"card": "c1", "amount": 500});
        let key = hash_key(&input);
        let short = BeginOptions {
            request: Some(input.clone()),
            lease: Some(Duration::from_millis(100)),
            ..BeginOptions::default()
        };
        let Begin::Claimed(dead) = store.begin(&tool, &key, &short).await.unwrap() else {
            panic!("no claim")
        };
        // The dead holder's effect, known upstream by its upstream key (or not at all).
        let charged_upstream = choice != "not_found";
        until_record(
            &*store,
            &tool,
            &key,
            "the dead holder's lease lapsed",
            |r| {
                r.as_ref()
                    .and_then(|r| r.lease_until)
                    .is_some_and(|u| u < SystemTime::now())
            },
        )
        .await;
        let asked = Arc::new(std::sync::Mutex::new(None));
        let settings = match choice {
            "rerun" => Idempotent::new(),
            "refuse" => Idempotent::new().on_unknown_outcome(OnUnknownOutcome::Refuse),
            _ => {
                let (asked, choice) = (asked.clone(), choice.to_string());
                Idempotent::new().reconcile(move |call: Reconcile| {
                    let (asked, choice) = (asked.clone(), choice.clone());
                    async move {
                        *asked.lock().unwrap() = Some(call.upstream_key);
                        Ok(match choice.as_str() {
                            "found" if charged_upstream => {
                                Reconciled::Found(json!({"charge": "ch_1", "found": true}))
                            }
                            "not_found" => Reconciled::NotFound,
                            _ => Reconciled::Unknown,
                        })
                    }
                })
            }
        };
        let d = Dispatcher::new(store.clone());
        d.register(ToolSpec::new(&tool, counting(sent.clone())).idempotent(settings))
            .unwrap();
        let answer = d.dispatch(&tool, input.clone()).await;
        let runs = sent.load(Ordering::SeqCst);
        match choice {
            "rerun" | "not_found" => {
                assert_eq!(
                    answer.unwrap(),
                    Dispatched::Ran(json!({"email_id": 1})),
                    "{choice}"
                );
                assert_eq!(runs, 1, "{choice}");
            }
            "found" => {
                let found = json!({"charge": "ch_1", "found": true});
                assert_eq!(answer.unwrap(), Dispatched::Replayed(found.clone()));
                assert_eq!(runs, 0, "found: the tool ran");
                let rec = store.lookup(&tool, &key).await.unwrap().unwrap();
                assert_eq!((rec.state, rec.response), (State::Succeeded, Some(found)));
            }
            _ => {
                let e = answer.unwrap_err();
                assert_eq!(e.kind, ErrorKind::OutcomeUnknown, "{choice}: {e:?}");
                assert!(e.detail().is_some() && e.hint().is_some(), "{e:?}");
                assert_eq!(runs, 0, "{choice}: the tool ran");
                // Every retry is refused the same way, until an operator forgets it.
                let again = d.dispatch(&tool, input.clone()).await.unwrap_err();
                assert_eq!(again.kind, ErrorKind::OutcomeUnknown, "{choice}");
                assert!(again.replayed());
                assert!(store.forget(&tool, &key).await.unwrap());
                assert!(matches!(
                    d.dispatch(&tool, input.clone()).await.unwrap(),
                    Dispatched::Ran(_)
                ));
                assert_eq!(sent.load(Ordering::SeqCst), 1, "{choice}");
            }
        }
        if matches!(choice, "found" | "not_found" | "unknown") {
            assert_eq!(
                *asked.lock().unwrap(),
                Some(dead.upstream_key),
                "{choice}: the read is told the dead attempt's upstream key"
            );
        }
    }
}

/// A crashed call retried after its ttl is still an unknown outcome (0.8.0): the takeover
/// refuses under `Refuse` and runs nothing, and the refusal's mark outlives the tool's own
/// short ttl: every later retry is refused too, until an operator forgets the record.
async fn a_crashed_call_retried_after_its_ttl_is_still_unknown(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("place_order"), Arc::new(AtomicU32::new(0)));
    let input = json!({"order": 17});
    let key = hash_key(&input);
    let ttl = Duration::from_millis(400);
    let crashed = BeginOptions {
        request: Some(input.clone()),
        ttl: Some(ttl),
        lease: Some(Duration::from_millis(100)),
        ..BeginOptions::default()
    };
    let Begin::Claimed(dead) = store.begin(&tool, &key, &crashed).await.unwrap() else {
        panic!("no claim")
    };
    let past = |at: SystemTime| async move {
        let mut deadline = Deadline::new("the store's time to pass", Duration::from_secs(10));
        while SystemTime::now() <= at {
            deadline.tick().await;
        }
    };
    past(dead.expires_at).await;
    let d = Dispatcher::new(store.clone());
    let settings = Idempotent::new()
        .ttl(ttl)
        .on_unknown_outcome(OnUnknownOutcome::Refuse);
    d.register(ToolSpec::new(&tool, counting(sent.clone())).idempotent(settings))
        .unwrap();
    let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutcomeUnknown, "{e:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 0, "the crashed call ran again");
    let marked = store.lookup(&tool, &key).await.unwrap().expect("the mark");
    assert_eq!(marked.upstream_key, dead.upstream_key);
    past(marked.expires_at).await;
    let again = d.dispatch(&tool, input.clone()).await.unwrap_err();
    assert_eq!(
        again.kind,
        ErrorKind::OutcomeUnknown,
        "the mark ended with its ttl"
    );
    assert!(again.replayed());
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    assert!(store.forget(&tool, &key).await.unwrap());
    assert!(matches!(
        d.dispatch(&tool, input.clone()).await.unwrap(),
        Dispatched::Ran(_)
    ));
}

/// A tool's own `unresolved_ttl` bounds how long its unknown outcome is kept: the refused
/// mark of a crashed call is replayed until the bound passes, then the key runs again.
/// (Under the server's 7 days it would stay refused: the loop below would time out.)
async fn a_tools_unresolved_ttl_bounds_its_unknown_outcome(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("place_order"), Arc::new(AtomicU32::new(0)));
    let input = json!({"order": 18});
    let key = hash_key(&input);
    let ttl = Duration::from_millis(300);
    let crashed = BeginOptions {
        request: Some(input.clone()),
        ttl: Some(ttl),
        lease: Some(Duration::from_millis(100)),
        ..BeginOptions::default()
    };
    let Begin::Claimed(dead) = store.begin(&tool, &key, &crashed).await.unwrap() else {
        panic!("no claim")
    };
    let mut deadline = Deadline::new(
        "the crashed claim's lease to lapse",
        Duration::from_secs(10),
    );
    while SystemTime::now() <= dead.lease_until {
        deadline.tick().await;
    }
    let d = Dispatcher::new(store.clone());
    let settings = Idempotent::new()
        .ttl(ttl)
        .unresolved_ttl(Duration::from_millis(500))
        .on_unknown_outcome(OnUnknownOutcome::Refuse);
    d.register(ToolSpec::new(&tool, counting(sent.clone())).idempotent(settings))
        .unwrap();
    let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutcomeUnknown, "{e:?}");
    let mut deadline = Deadline::new(
        "the tool's unresolved_ttl to end its refused mark",
        Duration::from_secs(20),
    );
    loop {
        match d.dispatch(&tool, input.clone()).await {
            Ok(Dispatched::Ran(_)) => break,
            Err(e) if e.kind == ErrorKind::OutcomeUnknown => deadline.tick().await,
            other => panic!("neither the mark nor a run: {other:?}"),
        }
    }
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

/// A tool without settings anywhere is not deduplicated: every call runs, nothing is
/// stored. `KeyStrategy::None` says the same explicitly; the dispatcher's defaults or a
/// toolkit's settings turn deduplication on.
async fn a_tool_without_settings_runs_every_time(store: Arc<dyn IdempotencyStore>) {
    let input = json!({"user": 7});
    let plain = |d: &Dispatcher, spec: ToolSpec| d.register(spec).unwrap();
    for how in ["bare", "none", "defaults", "toolkit"] {
        let (tool, runs) = (unique("get_user"), Arc::new(AtomicU32::new(0)));
        let spec = ToolSpec::new(&tool, counting(runs.clone()));
        let d = match how {
            "defaults" => Dispatcher::new(store.clone()).with_defaults(Idempotent::new()),
            _ => Dispatcher::new(store.clone()),
        };
        match how {
            "bare" | "defaults" => plain(&d, spec),
            "none" => plain(
                &d,
                spec.idempotent(Idempotent::new().strategy(KeyStrategy::None)),
            ),
            _ => d
                .register_toolkit(
                    Toolkit::new("users")
                        .idempotent(Idempotent::new())
                        .tool(spec),
                )
                .unwrap(),
        }
        for _ in 0..3 {
            assert!(matches!(
                d.dispatch(&tool, input.clone()).await.unwrap(),
                Dispatched::Ran(_) | Dispatched::Replayed(_)
            ));
        }
        let stored = store.lookup(&tool, &hash_key(&input)).await.unwrap();
        match how {
            "bare" | "none" => {
                assert_eq!(runs.load(Ordering::SeqCst), 3, "{how}");
                assert!(stored.is_none(), "{how}: {stored:?}");
            }
            _ => {
                assert_eq!(runs.load(Ordering::SeqCst), 1, "{how}");
                assert!(stored.is_some(), "{how}");
            }
        }
    }
}

/// Two tools whose key suppliers return the same key are two calls: each runs once.
async fn two_tools_with_one_explicit_key_never_meet(store: Arc<dyn IdempotencyStore>) {
    let d = Dispatcher::new(store);
    let (a, b) = (unique("create_issue"), unique("close_issue"));
    let (ra, rb) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let by_id = || Idempotent::new().key_supplier(|v| v["id"].as_str().map(str::to_string));
    d.register(ToolSpec::new(&a, counting(ra.clone())).idempotent(by_id()))
        .unwrap();
    d.register(ToolSpec::new(&b, counting(rb.clone())).idempotent(by_id()))
        .unwrap();
    let input = json!({"id": "issue-1"});
    for _ in 0..2 {
        d.dispatch(&a, input.clone()).await.unwrap();
        d.dispatch(&b, input.clone()).await.unwrap();
    }
    assert_eq!(
        (ra.load(Ordering::SeqCst), rb.load(Ordering::SeqCst)),
        (1, 1)
    );
}

/// A failure's `record` overrides `cache_failures`: `release()` leaves no record although
/// failures are cached, `abandon()` leaves the claim running (to lapse for a takeover),
/// and the default is remembered under `cache_failures(true)`.
async fn a_failure_says_what_becomes_of_its_claim(store: Arc<dyn IdempotencyStore>) {
    let d = Dispatcher::new(store.clone());
    for how in ["policy", "release", "abandon"] {
        let tool = unique(&format!("charge_{how}"));
        let kind = how.to_string();
        d.register(
            ToolSpec::new(
                &tool,
                tool_fn(move |_| {
                    let kind = kind.clone();
                    async move {
                        let e = ToolError::new("declined").with_response(json!({"declined": true}));
                        Err(match kind.as_str() {
                            "release" => e.release(),
                            "abandon" => e.abandon(),
                            _ => e,
                        })
                    }
                }),
            )
            .idempotent(
                Idempotent::new()
                    .cache_failures(true)
                    .lease(Duration::from_secs(30)),
            ),
        )
        .unwrap();
        let input = json!({"card": how});
        let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ToolFailed, "{how}: {e:?}");
        let record = store.lookup(&tool, &hash_key(&input)).await.unwrap();
        let state = record.map(|r| r.state);
        let expected = match how {
            "policy" => Some(State::Failed),
            "release" => None,
            _ => Some(State::InProgress),
        };
        assert_eq!(state, expected, "{how}");
    }
}

macro_rules! suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            async fn store() -> Option<Arc<dyn IdempotencyStore>> {
                $make
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn completion_reply_lost() {
                if let Some(s) = store().await {
                    a_completion_whose_reply_was_lost_is_repeated(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn recorded_later() {
                if let Some(s) = store().await {
                    a_result_the_store_cannot_take_yet_is_recorded_later(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn joins_its_holder() {
                if let Some(s) = store().await {
                    a_retry_in_the_holders_process_joins_it(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn unstorable_result() {
                if let Some(s) = store().await {
                    an_unstorable_result_is_marked(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn lost_lease() {
                if let Some(s) = store().await {
                    a_lost_lease_reaches_the_tool(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn unknown_outcome() {
                if let Some(s) = store().await {
                    an_unknown_outcome_is_a_decision(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn unknown_after_the_ttl() {
                if let Some(s) = store().await {
                    a_crashed_call_retried_after_its_ttl_is_still_unknown(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn tools_unresolved_ttl() {
                if let Some(s) = store().await {
                    a_tools_unresolved_ttl_bounds_its_unknown_outcome(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn without_settings() {
                if let Some(s) = store().await {
                    a_tool_without_settings_runs_every_time(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn failure_records() {
                if let Some(s) = store().await {
                    a_failure_says_what_becomes_of_its_claim(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn same_explicit_key() {
                if let Some(s) = store().await {
                    two_tools_with_one_explicit_key_never_meet(s).await
                }
            }
        }
    };
}

suite!(memory, Some(Arc::new(MemoryStore::new())));
#[cfg(feature = "redis")]
suite!(redis, redis_store().await);
suite!(postgres, Some(Arc::new(pg_store(pool()))));

/// A lease shorter than the heartbeat's shortest period (20 ms) still runs the call: the
/// heartbeat's first beat is due at once rather than before the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_shorter_than_a_beat_runs_the_call() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::new());
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = Dispatcher::new(store);
    d.register(
        ToolSpec::new(&tool, counting(sent.clone()))
            .idempotent(Idempotent::new().lease(Duration::from_millis(5))),
    )
    .unwrap();
    assert_eq!(
        d.dispatch(&tool, json!({"n": 1})).await.unwrap(),
        Dispatched::Ran(json!({"email_id": 1}))
    );
}

/// Which handles are one store, for the live holders a call joins: every `PgStore` over
/// one pool (or its clones) in one schema; every `RedisStore::connect` to one server,
/// database and prefix; otherwise the handle itself (no identity).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_over_one_pool_are_one_store() {
    let one = pool();
    let a = PgStore::new(one.clone());
    assert!(a.identity().is_some());
    assert_eq!(a.identity(), PgStore::new(one.clone()).identity());
    assert_ne!(
        a.identity(),
        PgStore::new(pool()).identity(),
        "another pool"
    );
    let elsewhere = PgStore::new(one).schema("elsewhere").unwrap();
    assert_ne!(a.identity(), elsewhere.identity(), "another schema");
    assert_eq!(MemoryStore::new().identity(), None);
    #[cfg(feature = "redis")]
    if let Some(url) = redis_url() {
        let (client, conn) = redis_connection(&url).await;
        let connect = |prefix: &'static str| {
            let client = client.clone();
            async move {
                RedisStore::connect(client, ::redis::AsyncConnectionConfig::new(), prefix)
                    .await
                    .unwrap()
                    .identity()
            }
        };
        let first = connect("idem:").await;
        assert!(first.is_some());
        assert_eq!(first, connect("idem:").await);
        assert_ne!(first, connect("other:").await, "another prefix");
        assert_eq!(RedisStore::new(conn, "idem:").identity(), None);
    }
}

/// A store whose completions take a while: a holder's result stays "being recorded" long
/// enough for a joining call to meet it there.
struct SlowCompletions(Arc<dyn IdempotencyStore>);

#[async_trait]
impl IdempotencyStore for SlowCompletions {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, forget, metrics, identity, joins_live_holders, admit_joined_wait,
    // durable, api_schema, statement_mode.
    async fn begin(&self, s: &str, k: &str, o: &BeginOptions) -> Result<Begin> {
        self.0.begin(s, k, o).await
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
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.0.complete(s, k, f, r, ok, c).await
    }
    async fn release(&self, s: &str, k: &str, f: i64) -> Result<()> {
        self.0.release(s, k, f).await
    }
    async fn extend(&self, s: &str, k: &str, f: i64, l: Option<Duration>) -> Result<SystemTime> {
        self.0.extend(s, k, f, l).await
    }
    async fn lookup(&self, s: &str, k: &str) -> Result<Option<Record>> {
        self.0.lookup(s, k).await
    }
    async fn purge(&self) -> Result<u64> {
        self.0.purge().await
    }
}

/// A retry that joins its holder just as the tool returns (its own wait, 0, ran out while
/// the holder ran) waits for the recording like any joiner of a result being recorded: it
/// is told "in progress" or replayed, never "not recorded" while the store takes the
/// result in time. Many rounds, since the two meet at a random point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_meeting_its_holder_as_the_tool_returns_waits_for_the_record() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(SlowCompletions(Arc::new(MemoryStore::new())));
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = Arc::new(Dispatcher::new(store));
    let quick = {
        let sent = sent.clone();
        tool_fn(move |input: Value| {
            let sent = sent.clone();
            async move {
                // Returns after a varying number of turns of the scheduler.
                for _ in 0..input["n"].as_u64().unwrap_or(0) % 7 {
                    tokio::task::yield_now().await;
                }
                Ok(json!({"email_id": sent.fetch_add(1, Ordering::SeqCst) + 1}))
            }
        })
    };
    d.register(ToolSpec::new(&tool, quick).idempotent(Idempotent::new()))
        .unwrap();
    for n in 0..400u64 {
        let input = json!({"n": n});
        let first = {
            let (d, tool, input) = (d.clone(), tool.clone(), input.clone());
            tokio::spawn(async move { d.dispatch(&tool, input).await })
        };
        for _ in 0..n % 5 {
            tokio::task::yield_now().await;
        }
        let retry = d.dispatch(&tool, input).await;
        let first = first.await.unwrap();
        // Whichever claimed ran; the other was told "in progress" or replayed.
        let (ran, other) = match first {
            Ok(Dispatched::Ran(_)) => (first, retry),
            _ => (retry, first),
        };
        assert!(matches!(ran, Ok(Dispatched::Ran(_))), "round {n}: {ran:?}");
        assert!(
            matches!(
                other,
                Ok(Dispatched::InProgress { .. } | Dispatched::Replayed(_))
            ),
            "round {n}: {other:?}"
        );
    }
    assert_eq!(sent.load(Ordering::SeqCst), 400);
}
