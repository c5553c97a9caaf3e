//! The tool dispatcher over every store: a tool's side effect runs once however often the
//! call is repeated.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
mod common;

use common::*;
use idempotency::*;
use serde_json::{json, Value};

/// A send_email tool that counts the emails it sends.
fn send_email(sent: Arc<AtomicU32>, delay: Duration) -> Arc<dyn Tool> {
    tool_fn(move |input: Value| {
        let sent = sent.clone();
        async move {
            tokio::time::sleep(delay).await;
            if input["to"] == "bounce@example.com" {
                return Err(ToolError {
                    kind: ErrorKind::ToolFailed,
                    message: "mailbox full".into(),
                    response: Some(json!({"error": "bounced"})),
                    retryable: true,
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
    policy: Policy,
    delay: Duration,
) -> Dispatcher {
    let d = Dispatcher::new(store);
    d.register(ToolSpec::new(tool, send_email(sent, delay)).policy(policy))
        .unwrap();
    d
}

async fn three_retries_send_one_email(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = dispatcher(
        store,
        &tool,
        sent.clone(),
        Policy::default(),
        Duration::ZERO,
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

async fn concurrent_dispatches_run_once(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = Arc::new(dispatcher(
        store,
        &tool,
        sent.clone(),
        Policy::default(),
        Duration::from_millis(200),
    ));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (d, tool) = (d.clone(), tool.clone());
            tokio::spawn(async move { d.dispatch(&tool, json!({"to": "ann@example.com"})).await })
        })
        .collect();
    let mut ran = 0;
    for c in calls {
        match c.await.unwrap().unwrap() {
            Dispatched::Ran(_) => ran += 1,
            Dispatched::InProgress { .. } | Dispatched::Replayed(_) => {}
        }
    }
    assert_eq!((ran, sent.load(Ordering::SeqCst)), (1, 1));
}

async fn failures_rerun_unless_cached(store: Arc<dyn IdempotencyStore>) {
    let bounce = json!({"to": "bounce@example.com"});
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        Policy::default(),
        Duration::ZERO,
    );
    for _ in 0..2 {
        let e = d.dispatch(&tool, bounce.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ToolFailed);
        assert_eq!(e.response(), Some(&json!({"error": "bounced"})));
    }
    // Cached failures are replayed, not rerun (the replay says so).
    let cached = Policy {
        cache_failures: true,
        ..Policy::default()
    };
    let tool2 = unique("send_email");
    let d2 = dispatcher(
        store.clone(),
        &tool2,
        sent.clone(),
        cached.clone(),
        Duration::ZERO,
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
    let ff = Policy {
        on_cache_hit: OnCacheHit::FailFast,
        ..cached.clone()
    };
    let d3 = dispatcher(store.clone(), &tool3, sent.clone(), ff, Duration::ZERO);
    d3.dispatch(&tool3, bounce.clone()).await.unwrap_err();
    assert_eq!(
        d3.dispatch(&tool3, bounce.clone()).await.unwrap_err().kind,
        ErrorKind::RepeatRefused
    );
    let tool4 = unique("send_email");
    let rerun = Policy {
        on_cache_hit: OnCacheHit::ReturnCachedIfSuccess,
        ..cached
    };
    let d4 = dispatcher(store, &tool4, sent, rerun, Duration::ZERO);
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

async fn explicit_keys(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("create_issue"), Arc::new(AtomicU32::new(0)));
    let by_title = Policy {
        strategy: KeyStrategy::explicit(|v| v["title"].as_str().map(str::to_string)),
        ..Policy::default()
    };
    let d = dispatcher(store, &tool, sent.clone(), by_title, Duration::ZERO);
    d.dispatch(&tool, json!({"title": "Crash", "body": "a"}))
        .await
        .unwrap();
    // Same title, another body: the key is the same, the request is not.
    assert_eq!(
        d.dispatch(&tool, json!({"title": "Crash", "body": "b"}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Mismatch
    );
    assert_eq!(
        d.dispatch(&tool, json!({"title": " ", "body": "b"}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::InvalidArgument
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

async fn a_crashed_holder_is_taken_over(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let input = json!({"to": "ann@example.com"});
    // A process claimed the call and died: its lease lapses.
    let key = canon::key_of(&canon::hash_value(&input).unwrap());
    let o = BeginOptions {
        request: Some(input.clone()),
        lease: Some(Duration::from_millis(100)),
        ..BeginOptions::default()
    };
    let Begin::Claimed(first) = store.begin(&tool, &key, &o).await.unwrap() else {
        panic!("no claim")
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let d = dispatcher(
        store.clone(),
        &tool,
        sent.clone(),
        Policy::default(),
        Duration::ZERO,
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
    let quick = Policy {
        timeout: Some(Duration::from_millis(100)),
        ..Policy::default()
    };
    let d = dispatcher(store, &tool, sent.clone(), quick, Duration::from_secs(2));
    assert_eq!(
        d.dispatch(&tool, json!({"to": "ann@example.com"}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Timeout
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sent.load(Ordering::SeqCst),
        0,
        "the timed-out tool kept running"
    );
}

/// A store that answers slowly, to show a tool's timeout covers store calls too.
struct Slow(Arc<dyn IdempotencyStore>);

#[async_trait]
impl IdempotencyStore for Slow {
    async fn begin(&self, s: &str, k: &str, o: &BeginOptions) -> Result<Begin> {
        tokio::time::sleep(Duration::from_millis(500)).await;
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
    let quick = Policy {
        timeout: Some(Duration::from_millis(100)),
        ..Policy::default()
    };
    let d = dispatcher(Arc::new(Slow(store)), &tool, sent, quick, Duration::ZERO);
    assert_eq!(
        d.dispatch(&tool, json!({"to": "ann@example.com"}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Timeout
    );
}

async fn retries_wait_out_a_running_call(store: Arc<dyn IdempotencyStore>) {
    let (tool, sent) = (unique("send_email"), Arc::new(AtomicU32::new(0)));
    let d = Arc::new(dispatcher(
        store,
        &tool,
        sent.clone(),
        Policy::default(),
        Duration::from_millis(300),
    ));
    let first = {
        let (d, tool) = (d.clone(), tool.clone());
        tokio::spawn(async move { d.dispatch(&tool, json!({"n": 1})).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let retry = Retry {
        attempts: 10,
        base: Duration::from_millis(50),
        max: Duration::from_millis(200),
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
    first.await.unwrap().unwrap();
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[test]
fn a_required_tool_without_protection_is_refused_at_registration() {
    let d = Dispatcher::new(Arc::new(MemoryStore::new()));
    let sent = Arc::new(AtomicU32::new(0));
    for strategy in [KeyStrategy::Uuid, KeyStrategy::None] {
        let spec =
            ToolSpec::new("charge_card", send_email(sent.clone(), Duration::ZERO)).policy(Policy {
                strategy,
                ..Policy::default()
            });
        assert_eq!(
            d.register(spec).unwrap_err().kind,
            ErrorKind::InvalidArgument
        );
    }
    let zero =
        ToolSpec::new("charge_card", send_email(sent.clone(), Duration::ZERO)).policy(Policy {
            ttl: Duration::ZERO,
            ..Policy::default()
        });
    assert_eq!(
        d.register(zero).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    // Without a side effect, nothing needs protecting.
    let read_only = ToolSpec::new("search", send_email(sent, Duration::ZERO))
        .side_effect(false)
        .policy(Policy {
            strategy: KeyStrategy::None,
            ..Policy::default()
        });
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
suite!(postgres, Some(Arc::new(PgStore::new(pool()))));
