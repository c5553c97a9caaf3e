//! Toolkits on a store that records what the dispatcher sends: a tool's settings replace
//! its toolkit's whole, a toolkit's the dispatcher's defaults ("the method wins"), field by
//! field only where a level says `inherit_unset`; what the governing settings leave unset
//! is not sent (unset on the wire); the toolkit's key supplier names its Explicit tools'
//! calls.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::common::*;
use async_trait::async_trait;
use pg_idempotency_client::*;
use serde_json::{json, Value};

/// What the dispatcher sent to `begin` and `complete`.
#[derive(Debug, Clone)]
struct Sent {
    key: String,
    options: BeginOptions,
    /// The `cache_failure` argument of the call's completion.
    cache_failure: Option<Option<bool>>,
}

/// A MemoryStore that records every begin and complete.
#[derive(Default)]
struct Recording {
    inner: MemoryStore,
    sent: Mutex<Vec<Sent>>,
}

impl Recording {
    fn last(&self) -> Sent {
        self.sent
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("nothing sent")
    }
}

#[async_trait]
impl IdempotencyStore for Recording {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, forget, metrics, identity, joins_live_holders, admit_joined_wait,
    // api_schema, statement_mode.
    async fn begin(&self, scope: &str, key: &str, options: &BeginOptions) -> Result<Begin> {
        self.sent.lock().unwrap().push(Sent {
            key: key.to_string(),
            options: options.clone(),
            cache_failure: None,
        });
        self.inner.begin(scope, key, options).await
    }
    async fn complete(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        response: Option<&Value>,
        succeeded: bool,
        cache_failure: Option<bool>,
    ) -> Result<Completed> {
        if let Some(last) = self.sent.lock().unwrap().last_mut() {
            last.cache_failure = Some(cache_failure);
        }
        self.inner
            .complete(scope, key, fence, response, succeeded, cache_failure)
            .await
    }
    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        self.inner.release(scope, key, fence).await
    }
    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime> {
        self.inner.extend(scope, key, fence, lease).await
    }
    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        self.inner.lookup(scope, key).await
    }
    async fn purge(&self) -> Result<u64> {
        self.inner.purge().await
    }
    fn durable(&self) -> bool {
        false
    }
}

/// A tool that fails (so that its completion carries `cache_failure`) and counts its runs.
fn failing(runs: Arc<AtomicU32>) -> Arc<dyn Tool> {
    tool_fn(move |_: Value| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err(ToolError::new("declined"))
        }
    })
}

fn ok_tool(runs: Arc<AtomicU32>) -> Arc<dyn Tool> {
    tool_fn(move |_: Value| {
        let runs = runs.clone();
        async move { Ok(json!({"run": runs.fetch_add(1, Ordering::SeqCst) + 1})) }
    })
}

const S: Duration = Duration::from_secs(1);

/// What a call of `tool` (own settings; None: none) in a toolkit (its settings) sends.
async fn sent_for(toolkit: Idempotent, tool: Option<Idempotent>, call: Option<Idempotent>) -> Sent {
    let store = Arc::new(Recording::default());
    let d = Dispatcher::new(store.clone());
    let name = unique("charge");
    d.register_toolkit(Toolkit::new("payments").idempotent(toolkit).tool(ToolSpec {
        idempotent: tool,
        ..ToolSpec::new(&name, failing(Arc::default()))
    }))
    .unwrap();
    let input = json!({"cents": 5});
    match call {
        Some(call) => d.dispatch_with(&name, input, &call).await,
        None => d.dispatch(&name, input).await,
    }
    .unwrap_err();
    store.last()
}

#[tokio::test]
async fn nothing_set_is_nothing_sent() {
    let sent = sent_for(Idempotent::new(), Some(Idempotent::new()), None).await;
    let o = &sent.options;
    assert_eq!(
        (o.ttl, o.lease, o.on_cache_hit, o.on_mismatch, o.wait),
        (None, None, None, None, Duration::ZERO),
        "{o:?}"
    );
    assert_eq!(
        sent.cache_failure,
        Some(None),
        "cache_failures sent: {sent:?}"
    );
    // HashInput: the key is the input's hash, and the whole input its fingerprint.
    let input = json!({"cents": 5});
    assert_eq!(
        sent.key,
        pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap())
    );
    assert_eq!(o.request, Some(input));
}

#[tokio::test]
async fn a_tools_settings_replace_its_toolkits_whole_unless_it_inherits() {
    let toolkit = Idempotent::new()
        .ttl(3 * S)
        .lease(2 * S)
        .on_cache_hit(OnCacheHit::FailFast)
        .on_mismatch(OnMismatch::Ignore)
        .cache_failures(true)
        .wait(S);
    // No settings on the tool: the toolkit's govern it, every field.
    let sent = sent_for(toolkit.clone(), None, None).await;
    let o = &sent.options;
    assert_eq!(
        (o.ttl, o.lease, o.on_cache_hit, o.on_mismatch, o.wait),
        (
            Some(3 * S),
            Some(2 * S),
            Some(OnCacheHit::FailFast),
            Some(OnMismatch::Ignore),
            S
        )
    );
    assert_eq!(sent.cache_failure, Some(Some(true)));

    // Settings of its own, even empty ones: the toolkit's are not its (the Java framework's
    // `@Idempotent` on the method replaces the class's whole); what it leaves unset is not
    // sent, so the scope's policy decides.
    for tool in [Idempotent::new(), Idempotent::new().ttl(7 * S)] {
        let sent = sent_for(toolkit.clone(), Some(tool.clone()), None).await;
        let o = &sent.options;
        assert_eq!(
            (o.lease, o.on_cache_hit, o.on_mismatch, o.wait),
            (None, None, None, Duration::ZERO),
            "the toolkit's settings leaked into {tool:?}"
        );
        assert_eq!(o.ttl, tool.ttl);
        assert_eq!(sent.cache_failure, Some(None), "{tool:?}");
    }

    // Field by field on request: what the tool sets is its own, the rest the toolkit's.
    let tool = Idempotent::new()
        .ttl(7 * S)
        .on_cache_hit(OnCacheHit::ReturnCachedIfSuccess)
        .cache_failures(false)
        .inherit_unset();
    let sent = sent_for(toolkit.clone(), Some(tool.clone()), None).await;
    let o = &sent.options;
    assert_eq!(
        (o.ttl, o.lease, o.on_cache_hit, o.on_mismatch, o.wait),
        (
            Some(7 * S),
            Some(2 * S),
            Some(OnCacheHit::ReturnCachedIfSuccess),
            Some(OnMismatch::Ignore),
            S
        )
    );
    assert_eq!(sent.cache_failure, Some(Some(false)));

    // The call's own over the tool's, field by field.
    let call = Idempotent::new().ttl(9 * S).lease(4 * S);
    let sent = sent_for(toolkit, Some(tool), Some(call)).await;
    assert_eq!(
        (
            sent.options.ttl,
            sent.options.lease,
            sent.options.on_cache_hit
        ),
        (
            Some(9 * S),
            Some(4 * S),
            Some(OnCacheHit::ReturnCachedIfSuccess)
        )
    );
}

#[tokio::test]
async fn a_toolkits_settings_replace_the_dispatchers_defaults_unless_it_inherits() {
    for (kit, lease) in [
        (Idempotent::new().ttl(6 * S), None),
        (Idempotent::new().ttl(6 * S).inherit_unset(), Some(S)),
    ] {
        let store = Arc::new(Recording::default());
        let d = Dispatcher::new(store.clone()).with_defaults(Idempotent::new().ttl(5 * S).lease(S));
        let name = unique("charge");
        d.register_toolkit(
            Toolkit::new("payments")
                .idempotent(kit.clone())
                .tool(ToolSpec::new(&name, failing(Arc::default()))),
        )
        .unwrap();
        d.dispatch(&name, json!({})).await.unwrap_err();
        let o = store.last().options;
        assert_eq!((o.ttl, o.lease), (Some(6 * S), lease), "{kit:?}");
    }
}

#[tokio::test]
async fn the_toolkits_key_supplier_names_its_explicit_tools_calls() {
    let store = Arc::new(Recording::default());
    let d = Dispatcher::new(store.clone());
    let (issue, order, labelled) = (
        unique("create_issue"),
        unique("place_order"),
        unique("label"),
    );
    let issues = Arc::new(AtomicU32::new(0));
    d.register_toolkit(
        Toolkit::new("issue_tools")
            .key_supplier(|v| v["title"].as_str().map(str::to_lowercase))
            .idempotent(Idempotent::new().explicit())
            // Explicit, from the toolkit: the toolkit's supplier.
            .tool(ToolSpec::new(&issue, ok_tool(issues.clone())))
            // The tool's own strategy beats the toolkit's.
            .tool(
                ToolSpec::new(&order, ok_tool(Arc::default()))
                    .idempotent(Idempotent::new().hash_input()),
            )
            // The tool's own supplier beats the toolkit's.
            .tool(
                ToolSpec::new(&labelled, ok_tool(Arc::default())).idempotent(
                    Idempotent::new().key_supplier(|v| v["label"].as_str().map(str::to_string)),
                ),
            ),
    )
    .unwrap();
    let input = json!({"title": "Crash", "body": "a", "label": "bug"});
    d.dispatch(&issue, input.clone()).await.unwrap();
    assert_eq!(store.last().key, "crash");
    // Explicit compares nothing by default: another body replays the same issue.
    assert_eq!(
        d.dispatch(&issue, json!({"title": "CRASH", "body": "b"}))
            .await
            .unwrap(),
        Dispatched::Replayed(json!({"run": 1}))
    );
    assert_eq!(store.last().options.request, None);
    assert_eq!(issues.load(Ordering::SeqCst), 1);
    // A blank key fails the call.
    assert_eq!(
        d.dispatch(&issue, json!({"title": 7}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::InvalidArgument
    );
    d.dispatch(&order, input.clone()).await.unwrap();
    assert_eq!(
        store.last().key,
        pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap())
    );
    d.dispatch(&labelled, input).await.unwrap();
    assert_eq!(store.last().key, "bug");
}

#[tokio::test]
async fn a_toolkits_fingerprint_and_timeout_apply_unless_the_tool_says_otherwise() {
    let d = Dispatcher::in_memory();
    let (strict, loose, slow) = (unique("strict"), unique("loose"), unique("slow"));
    d.register_toolkit(
        Toolkit::new("issue_tools")
            .key_supplier(|v| v["title"].as_str().map(str::to_string))
            .idempotent(
                Idempotent::new()
                    .explicit()
                    .fingerprint(Fingerprint::WholeInput)
                    .timeout(Duration::from_millis(50)),
            )
            .tool(ToolSpec::new(&strict, ok_tool(Arc::default())))
            .tool(
                ToolSpec::new(&loose, ok_tool(Arc::default())).idempotent(
                    Idempotent::new()
                        .fingerprint(Fingerprint::Nothing)
                        .inherit_unset(),
                ),
            )
            .tool(ToolSpec::new(
                &slow,
                tool_fn(|_| std::future::pending::<std::result::Result<Value, ToolError>>()),
            )),
    )
    .unwrap();
    for tool in [&strict, &loose] {
        d.dispatch(tool, json!({"title": "t", "body": "a"}))
            .await
            .unwrap();
    }
    let other_body = json!({"title": "t", "body": "b"});
    assert_eq!(
        d.dispatch(&strict, other_body.clone())
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Mismatch,
        "the toolkit's fingerprint"
    );
    assert!(matches!(
        d.dispatch(&loose, other_body).await.unwrap(),
        Dispatched::Replayed(_)
    ));
    let timed_out = tokio::time::timeout(
        Duration::from_secs(10),
        d.dispatch(&slow, json!({"title": "t"})),
    )
    .await
    .expect("the toolkit's timeout never fired");
    assert_eq!(timed_out.unwrap_err().kind, ErrorKind::Timeout);
}

#[tokio::test]
async fn an_explicit_tool_without_a_supplier_is_refused_and_so_is_its_whole_toolkit() {
    let d = Dispatcher::in_memory();
    let lone = unique("create_issue");
    let e = d
        .register(
            ToolSpec::new(&lone, ok_tool(Arc::default())).idempotent(Idempotent::new().explicit()),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
    assert!(e.hint().is_some());

    // One tool of a toolkit is refused (Required, but Uuid): none is registered.
    let (good, bad) = (unique("good"), unique("bad"));
    let e = d
        .register_toolkit(
            Toolkit::new("mixed")
                .tool(ToolSpec::new(&good, ok_tool(Arc::default())))
                .tool(
                    ToolSpec::new(&bad, ok_tool(Arc::default()))
                        .required()
                        .idempotent(Idempotent::new().strategy(KeyStrategy::Uuid)),
                ),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert_eq!(
        d.dispatch(&good, json!({})).await.unwrap_err().kind,
        ErrorKind::UnknownTool
    );

    // A toolkit's Uuid strategy is refused for its Required tools too, and a call cannot
    // lift a Required tool's protection.
    let e = d
        .register_toolkit(
            Toolkit::new("fresh")
                .idempotent(Idempotent::new().strategy(KeyStrategy::Uuid))
                .tool(ToolSpec::new(unique("charge"), ok_tool(Arc::default())).required()),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let charge = unique("charge");
    d.register(
        ToolSpec::new(&charge, ok_tool(Arc::default()))
            .required()
            .idempotent(Idempotent::new()),
    )
    .unwrap();
    let e = d
        .dispatch_with(
            &charge,
            json!({}),
            &Idempotent::new().strategy(KeyStrategy::None),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
}
