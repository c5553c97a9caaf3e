//! An error that says the lease is not held never becomes a remembered failure: a tool
//! that stops at `ctx.ensure_lease()?` did not act, so its claim is released (under its
//! fence) and a retry runs it, even under the Java framework's `place_order` settings
//! (`cache_failures`, `FAIL_FAST`), which would refuse every retry of a remembered failure
//! until the ttl ends.
//!
//! The store is cut off through `Cut`, a wrapper over the real store whose `extend` and
//! `complete` fail as a lost connection does while it is down (the fault suite cuts real
//! servers; here the point is the holder's decision, on every store).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pg_idempotency_client::*;
use pg_idempotency_tests::until_async;
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::harness::Harness;

/// How long a test waits for something it is sure will happen.
const BOUND: Duration = Duration::from_secs(20);

/// A real store that can be cut off: while down, the holder's heartbeat (`extend`) and
/// its recording (`complete`) fail without reaching the store.
struct Cut {
    inner: Arc<dyn IdempotencyStore>,
    down: AtomicBool,
    /// Completions that reached the store and were answered.
    completed: AtomicU32,
}

impl Cut {
    fn cut_off(&self) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            // What PgStore answers when it cannot connect.
            return Err(Error::new(ErrorKind::Database, "connection refused (test)"));
        }
        Ok(())
    }
}

#[async_trait]
impl IdempotencyStore for Cut {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, metrics, identity, joins_live_holders, admit_joined_wait, api_schema,
    // statement_mode.
    async fn begin(&self, s: &str, k: &str, o: &BeginOptions) -> Result<Begin> {
        self.cut_off()?;
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
        self.cut_off()?;
        let done = self.inner.complete(s, k, f, r, ok, c).await;
        self.completed.fetch_add(1, Ordering::SeqCst);
        done
    }
    async fn release(&self, s: &str, k: &str, f: i64) -> Result<()> {
        self.cut_off()?;
        self.inner.release(s, k, f).await
    }
    async fn extend(&self, s: &str, k: &str, f: i64, l: Option<Duration>) -> Result<SystemTime> {
        self.cut_off()?;
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
}

/// The Java framework's `place_order`: failures cached, a repeat of a completed call refused
/// (FAIL_FAST). The first run finds the store cut off until its lease ended (nobody takes
/// the call over) and stops at `ensure_lease` before placing anything; the store comes
/// back; the holder releases the claim; the retry places the order, once.
pub async fn an_unconfirmed_lease_releases_the_call(h: Harness) {
    let cut = Arc::new(Cut {
        inner: h.store.clone(),
        down: AtomicBool::new(false),
        completed: AtomicU32::new(0),
    });
    let scope = h.scope("place_order");
    let (runs, placed, told) = (
        Arc::new(AtomicU32::new(0)),
        Arc::new(AtomicU32::new(0)),
        Arc::new(Notify::new()),
    );
    let place_order = {
        let (cut, runs, placed, told) = (cut.clone(), runs.clone(), placed.clone(), told.clone());
        tool_fn_with(move |_input: Value, ctx: CallContext| {
            let (cut, runs, placed, told) =
                (cut.clone(), runs.clone(), placed.clone(), told.clone());
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    // The store goes out of reach as the first run starts, until its lease
                    // ends without a heartbeat getting through.
                    cut.down.store(true, Ordering::SeqCst);
                    ctx.lease_lost().await;
                    told.notify_one();
                }
                ctx.ensure_lease()?;
                let n = placed.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(json!({"order": n}))
            }
        })
    };
    let d = Arc::new(Dispatcher::new(cut.clone()));
    d.register(
        ToolSpec::new(&scope, place_order).idempotent(
            Idempotent::new()
                .hash_input()
                .cache_failures(true)
                .on_cache_hit(OnCacheHit::FailFast)
                .ttl(Duration::from_secs(3600))
                .lease(Duration::from_millis(600)),
        ),
    )
    .unwrap();
    let input = json!({"sku": "A-1", "qty": 2});
    let first = tokio::spawn({
        let (d, scope, input) = (d.clone(), scope.clone(), input.clone());
        async move { d.dispatch(&scope, input).await }
    });
    tokio::time::timeout(BOUND, told.notified())
        .await
        .expect("the tool was never told its lease was unconfirmed");
    // The store is back before anybody took the call over.
    cut.down.store(false, Ordering::SeqCst);
    let e = tokio::time::timeout(BOUND, first)
        .await
        .expect("the first dispatch never answered")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::LeaseLost, "{e:?}");
    assert_eq!(placed.load(Ordering::SeqCst), 0, "it stopped short");
    // The holder's recording gets through once the store is back.
    let cut_ = cut.clone();
    until_async("the holder's recording reached the store", BOUND, || {
        let cut = cut_.clone();
        async move { cut.completed.load(Ordering::SeqCst) >= 1 }
    })
    .await;
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let record = h.lookup(&scope, &key).await.unwrap();
    assert_eq!(
        record.map(|r| r.state),
        None,
        "released, not remembered as failed"
    );
    // The retry runs the tool: the order is placed, once.
    let again = d.dispatch(&scope, input.clone()).await;
    assert_eq!(again.unwrap(), Dispatched::Ran(json!({"order": 1})));
    assert_eq!(placed.load(Ordering::SeqCst), 1);
    assert_eq!(
        d.dispatch(&scope, input).await.unwrap_err().kind,
        ErrorKind::RepeatRefused,
        "a repeat of the placed order is refused (FAIL_FAST)"
    );
    // The first answer said what was true: the store was out of reach, not taken over.
    assert!(e.to_string().contains("unconfirmed"), "{e}");
}
