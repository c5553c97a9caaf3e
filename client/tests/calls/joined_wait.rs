//! A store's gate over the joined waits (`IdempotencyStore::admit_joined_wait`): a call that
//! joins its live holder asks it before it waits, holds what it admitted until it has its
//! answer, and, not admitted, is answered at once as a duplicate without `wait` is.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pg_idempotency_client::*;
use pg_idempotency_tests::until;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::common::*;

/// A guard against a hang, far above anything here: not a latency bound.
const BOUND: Duration = Duration::from_secs(30);

/// A real store with a gate over joined waits: it admits while `admits` is set, counts
/// what it was asked, and how many admitted waits hold their permit now.
struct Gated {
    inner: MemoryStore,
    admits: AtomicBool,
    asked: AtomicU32,
    holding: Arc<AtomicU32>,
}

/// A permit: counted while a joined call holds it.
struct Permit(Arc<AtomicU32>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl IdempotencyStore for Gated {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, forget, metrics, identity, joins_live_holders, api_schema,
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
        self.inner.complete(s, k, f, r, ok, c).await
    }
    async fn release(&self, s: &str, k: &str, f: i64) -> Result<()> {
        self.inner.release(s, k, f).await
    }
    async fn extend(&self, s: &str, k: &str, f: i64, l: Option<Duration>) -> Result<SystemTime> {
        self.inner.extend(s, k, f, l).await
    }
    async fn lookup(&self, s: &str, k: &str) -> Result<Option<Record>> {
        self.inner.lookup(s, k).await
    }
    async fn purge(&self) -> Result<u64> {
        self.inner.purge().await
    }
    fn durable(&self) -> bool {
        false
    }
    fn admit_joined_wait(&self, _scope: &str, _key: &str) -> Option<JoinedWait<'_>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if !self.admits.load(Ordering::SeqCst) {
            return None;
        }
        self.holding.fetch_add(1, Ordering::SeqCst);
        Some(JoinedWait::holding(Permit(self.holding.clone())))
    }
}

/// A call that runs until the test lets it return, counting its runs.
fn held_tool(runs: Arc<AtomicU32>, started: Arc<Notify>, go: Arc<Notify>) -> Arc<dyn Tool> {
    tool_fn(move |_input: Value| {
        let (runs, started, go) = (runs.clone(), started.clone(), go.clone());
        async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            started.notify_one();
            go.notified().await;
            Ok(json!({"run": n}))
        }
    })
}

/// While the holder's tool runs: a duplicate the gate does not admit is answered
/// `InProgress` at once (its `wait` is a minute); one it admits waits, holding its permit,
/// and replays the result once the holder records it. The tool runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_wait_passes_the_stores_gate() {
    let store = Arc::new(Gated {
        inner: MemoryStore::new(),
        admits: AtomicBool::new(false),
        asked: AtomicU32::new(0),
        holding: Arc::default(),
    });
    let (runs, started, go) = (
        Arc::new(AtomicU32::new(0)),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
    );
    let tool = unique("send_email");
    let d = Arc::new(Dispatcher::new(store.clone()));
    d.register(
        ToolSpec::new(&tool, held_tool(runs.clone(), started.clone(), go.clone()))
            .idempotent(Idempotent::new().wait(Duration::from_secs(60))),
    )
    .unwrap();
    let input = json!({"to": "a@x"});
    let first = tokio::spawn({
        let (d, tool, input) = (d.clone(), tool.clone(), input.clone());
        async move { d.dispatch(&tool, input).await }
    });
    started.notified().await;
    // Not admitted: answered at once, as a duplicate without a wait.
    let refused = tokio::time::timeout(BOUND, d.dispatch(&tool, input.clone()))
        .await
        .expect("a duplicate not admitted does not wait")
        .unwrap();
    assert!(
        matches!(refused, Dispatched::InProgress { .. }),
        "{refused:?}"
    );
    assert_eq!(store.asked.load(Ordering::SeqCst), 1);
    // Admitted: it waits, holding its permit, until the holder records the result.
    store.admits.store(true, Ordering::SeqCst);
    let joined = tokio::spawn({
        let (d, tool, input) = (d.clone(), tool.clone(), input.clone());
        async move { d.dispatch(&tool, input).await }
    });
    until("the joined call to hold its permit", BOUND, || {
        store.holding.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(!joined.is_finished(), "an admitted joined call waits");
    go.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first, Dispatched::Ran(json!({"run": 1})));
    let joined = joined.await.unwrap().unwrap();
    assert_eq!(joined, Dispatched::Replayed(json!({"run": 1})));
    assert_eq!(
        store.holding.load(Ordering::SeqCst),
        0,
        "the permit is dropped"
    );
    assert_eq!(store.asked.load(Ordering::SeqCst), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
