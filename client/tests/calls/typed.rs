//! Typed tools over MemoryStore and PgStore: a function of a typed input and one attribute
//! (`#[pg_idempotency_client::tool]`), run once however often it is called, its input refused before
//! any claim when it does not fit, its errors (any error, through `?`) reported as what
//! they are, and listed for an agent with its description and input schema.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use pg_idempotency_client::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Emails sent, by recipient: every test sends to recipients of its own.
static SENT: Mutex<Option<HashMap<String, u32>>> = Mutex::new(None);

fn sent_to(to: &str) -> u32 {
    let sent = SENT.lock().unwrap();
    sent.as_ref().and_then(|s| s.get(to)).copied().unwrap_or(0)
}

#[derive(Deserialize, schemars::JsonSchema)]
struct SendEmail {
    /// The recipient's address.
    to: String,
    subject: String,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Sent {
    email_id: u32,
    /// The call's key, as the tool was told it.
    key: Option<String>,
}

#[pg_idempotency_client::tool(
    description = "Send an email",
    idempotent(ttl_secs = 86_400),
    required
)]
async fn send_email(input: SendEmail, ctx: CallContext) -> Result<Sent, ToolError> {
    assert!(!input.subject.is_empty());
    let mut sent = SENT.lock().unwrap();
    let count = sent
        .get_or_insert_with(HashMap::new)
        .entry(input.to)
        .or_default();
    *count += 1;
    Ok(Sent {
        email_id: *count,
        key: ctx.key,
    })
}

#[derive(Deserialize, schemars::JsonSchema)]
struct PlaceOrder {
    sku: String,
    quantity: u32,
}

/// Place an order.
///
/// A rejected order stays rejected: its failure is remembered, and a repeat refused.
#[pg_idempotency_client::tool(idempotent(strategy = hash_input, cache_failures, on_cache_hit = fail_fast))]
async fn place_order(input: PlaceOrder) -> Result<String, ToolError> {
    if input.quantity == 0 {
        return Err(ToolError::new("nothing to order"));
    }
    Ok(format!("ordered {} x {}", input.quantity, input.sku))
}

#[derive(Deserialize, schemars::JsonSchema)]
struct CreateIssue {
    title: String,
    body: String,
}

fn issue_key(issue: &CreateIssue) -> String {
    issue.title.to_lowercase()
}

/// Create an issue in the tracker.
#[pg_idempotency_client::tool(idempotent(key = issue_key, ttl_secs = 86_400))]
async fn create_issue(input: CreateIssue) -> Result<String, ToolError> {
    Ok(format!("created: {} ({})", input.title, input.body))
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Render {
    template: String,
}

/// Read a template: `?` on an io error, through `From<std::io::Error> for ToolError`.
#[pg_idempotency_client::tool(read_only)]
async fn read_template(input: Render) -> Result<String, ToolError> {
    Ok(std::fs::read_to_string(input.template)?)
}

/// Parse a template: `?` on a serde error, through `From<serde_json::Error>`.
#[pg_idempotency_client::tool(read_only)]
async fn parse_template(input: Render) -> Result<serde_json::Value, ToolError> {
    Ok(serde_json::from_str(&input.template)?)
}

/// Read a template, failing with any error at all (a boxed io error).
#[pg_idempotency_client::tool(read_only)]
async fn read_template_boxed(
    input: Render,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    Ok(std::fs::read_to_string(input.template)?)
}

/// A failure of the caller's own type, with its cause as its source (as thiserror makes).
#[derive(Debug)]
struct Rendering(std::io::Error);

impl std::fmt::Display for Rendering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("rendering the welcome email")
    }
}

impl std::error::Error for Rendering {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Render an email, failing with an error type of its own.
#[pg_idempotency_client::tool(read_only)]
async fn render_email(input: Render) -> Result<String, Rendering> {
    std::fs::read_to_string(input.template).map_err(Rendering)
}

/// Read a template, failing with anyhow's error and its context.
#[pg_idempotency_client::tool(read_only)]
async fn read_template_anyhow(input: Render) -> anyhow::Result<String> {
    use anyhow::Context;
    std::fs::read_to_string(&input.template).context("reading the template")
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Charge {
    cents: u64,
}

/// A provider's refusal, told as a ToolError of its own, returned through a generic error
/// type.
#[pg_idempotency_client::tool(idempotent(cache_failures = false))]
async fn charge_card(input: Charge) -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
    Err(ToolError {
        kind: ErrorKind::Http,
        message: format!("the provider is busy; {} cents not charged", input.cents),
        response: Some(json!({"status": 503})),
        retryable: true,
        retry_after: Some(Duration::from_secs(2)),
        record: Default::default(),
    }
    .into())
}

/// The same refusal, through anyhow.
#[pg_idempotency_client::tool(idempotent(cache_failures = false))]
async fn charge_card_anyhow(input: Charge) -> anyhow::Result<u64> {
    Err(ToolError {
        kind: ErrorKind::Http,
        message: format!("the provider is busy; {} cents not charged", input.cents),
        response: Some(json!({"status": 503})),
        retryable: true,
        retry_after: Some(Duration::from_secs(2)),
        record: Default::default(),
    }
    .into())
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Visit {
    page: String,
}

/// Count a visit: its counter is the tool's shared state, given when the tool is built.
#[pg_idempotency_client::tool(idempotent)]
async fn count_visit(
    Shared(visits): Shared<Arc<AtomicU32>>,
    input: Visit,
    ctx: CallContext,
) -> Result<String, ToolError> {
    let n = visits.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!(
        "visit {n} of {} (attempt {})",
        input.page, ctx.attempt
    ))
}

/// A nested call's failure (here a mismatch), met through `?`.
#[pg_idempotency_client::tool(read_only)]
async fn forward(input: Charge) -> Result<u64, pg_idempotency_client::Error> {
    Err(Error::new(
        ErrorKind::Mismatch,
        format!("the nested call of {} cents", input.cents),
    )
    .with_response(Some(json!({"nested": true})))
    .with_retryable(true))
}

/// A spec under a name of its own, so that runs and stores never share records.
fn renamed(mut spec: ToolSpec, name: &str) -> ToolSpec {
    spec.name = unique(name);
    spec
}

fn dispatcher(store: Arc<dyn IdempotencyStore>, spec: ToolSpec) -> (Dispatcher, String) {
    let name = spec.name.clone();
    let d = Dispatcher::new(store);
    d.register(spec).unwrap();
    (d, name)
}

fn key_of(input: &serde_json::Value) -> String {
    pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(input).unwrap())
}

async fn three_calls_run_once_and_replay_the_typed_output(store: Arc<dyn IdempotencyStore>) {
    let (d, tool) = dispatcher(store, renamed(send_email_tool(), "send_email"));
    let to = unique("ann") + "@example.com";
    let input = json!({"to": to, "subject": "Welcome"});
    let expected = Sent {
        email_id: 1,
        key: Some(key_of(&input)),
    };
    let Dispatched::Ran(first) = d.dispatch(&tool, input.clone()).await.unwrap() else {
        panic!("the first call did not run the tool");
    };
    assert_eq!(serde_json::from_value::<Sent>(first).unwrap(), expected);
    for _ in 0..2 {
        let Dispatched::Replayed(again) = d.dispatch(&tool, input.clone()).await.unwrap() else {
            panic!("a repeat was not replayed");
        };
        assert_eq!(serde_json::from_value::<Sent>(again).unwrap(), expected);
    }
    assert_eq!(sent_to(&to), 1);
}

async fn a_bad_input_is_refused_before_any_claim(store: Arc<dyn IdempotencyStore>) {
    // place_order caches failures: had the call been claimed and its input refused by the
    // tool itself, the failure would be remembered under the input's key.
    let (d, tool) = dispatcher(store.clone(), renamed(place_order_tool(), "place_order"));
    for input in [
        json!({"sku": "B-1", "quantity": "two"}),
        json!({"sku": "B-1"}),
        json!("B-1"),
    ] {
        let e = d.dispatch(&tool, input.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{input}: {e}");
        assert!(e.message.contains("PlaceOrder"), "{}", e.message);
        let detail = e.detail().expect("the serde error as the detail");
        assert!(
            ["invalid type", "missing field `quantity`"]
                .iter()
                .any(|d| detail.contains(d)),
            "{detail}"
        );
        assert!(e.hint().is_some_and(|h| h.contains("schema")));
        assert!(
            store
                .lookup(&tool, &key_of(&input))
                .await
                .unwrap()
                .is_none(),
            "{input} was claimed"
        );
    }
    // A good input runs, and a failed one is remembered: the lookups above could see one.
    let empty = json!({"sku": "B-1", "quantity": 0});
    let e = d.dispatch(&tool, empty.clone()).await.unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::ToolFailed, "nothing to order")
    );
    assert!(store
        .lookup(&tool, &key_of(&empty))
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        d.dispatch(&tool, empty).await.unwrap_err().kind,
        ErrorKind::RepeatRefused
    );
}

async fn an_explicit_typed_key_names_the_call(store: Arc<dyn IdempotencyStore>) {
    let (d, tool) = dispatcher(store, renamed(create_issue_tool(), "create_issue"));
    let title = unique("Crash on start");
    let first = d
        .dispatch(&tool, json!({"title": title, "body": "it crashes"}))
        .await
        .unwrap();
    // Same title, same issue: a body edit replays the first one.
    let edited = d
        .dispatch(
            &tool,
            json!({"title": title.to_uppercase(), "body": "it crashes at once"}),
        )
        .await
        .unwrap();
    assert_eq!(
        edited,
        Dispatched::Replayed(match first {
            Dispatched::Ran(v) => v,
            other => panic!("the first call did not run: {other:?}"),
        })
    );
}

async fn errors_through_question_mark_are_tool_failures(store: Arc<dyn IdempotencyStore>) {
    let d = Dispatcher::new(store);
    for spec in [
        read_template_tool(),
        read_template_boxed_tool(),
        read_template_anyhow_tool(),
        render_email_tool(),
    ] {
        d.register(spec).unwrap();
    }
    let missing = json!({"template": "/nonexistent/welcome.txt"});
    let not_found = std::fs::read_to_string("/nonexistent/welcome.txt")
        .unwrap_err()
        .to_string();
    for tool in ["read_template", "read_template_boxed"] {
        let e = d.dispatch(tool, missing.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::ToolFailed, "{tool}");
        assert_eq!(e.message, not_found, "{tool}");
    }
    // An error type of the tool's own: its message, then its source's.
    let e = d
        .dispatch("render_email", missing.clone())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ToolFailed);
    assert_eq!(
        e.message,
        format!("rendering the welcome email: {not_found}")
    );
    // anyhow's context, then the error under it.
    let e = d
        .dispatch("read_template_anyhow", missing)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ToolFailed);
    assert!(
        e.message
            .starts_with("reading the template: No such file or directory"),
        "{}",
        e.message
    );

    d.register(parse_template_tool()).unwrap();
    let e = d
        .dispatch("parse_template", json!({"template": "{not json"}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ToolFailed);
    assert!(e.message.contains("key must be a string"), "{}", e.message);
}

async fn a_tool_error_keeps_what_it_says_through_any_error_type(store: Arc<dyn IdempotencyStore>) {
    let d = Dispatcher::new(store);
    for spec in [charge_card_tool(), charge_card_anyhow_tool()] {
        let (name, spec) = (spec.name.clone(), renamed(spec, "charge"));
        let tool = spec.name.clone();
        d.register(spec).unwrap();
        let e = d.dispatch(&tool, json!({"cents": 1200})).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Http, "{name}");
        assert_eq!(
            e.message, "the provider is busy; 1200 cents not charged",
            "{name}"
        );
        assert_eq!(e.response(), Some(&json!({"status": 503})), "{name}");
        assert!(e.retryable(), "{name}");
        assert_eq!(e.retry_after(), Some(Duration::from_secs(2)), "{name}");
    }
}

async fn a_tool_with_shared_state_runs_once(store: Arc<dyn IdempotencyStore>) {
    let visits = Arc::new(AtomicU32::new(0));
    let (d, tool) = dispatcher(
        store,
        renamed(count_visit_tool(visits.clone()), "count_visit"),
    );
    let input = json!({"page": unique("/home")});
    let page = input["page"].as_str().unwrap().to_string();
    let first = format!("visit 1 of {page} (attempt 1)");
    assert_eq!(
        d.dispatch(&tool, input.clone()).await.unwrap(),
        Dispatched::Ran(json!(first))
    );
    for _ in 0..2 {
        assert_eq!(
            d.dispatch(&tool, input.clone()).await.unwrap(),
            Dispatched::Replayed(json!(first))
        );
    }
    assert_eq!(visits.load(Ordering::SeqCst), 1);
}

/// A nested call's error fails this tool: its kind was the nested call's, not this one's.
#[tokio::test]
async fn a_nested_client_error_is_a_tool_failure() {
    let d = Dispatcher::in_memory();
    d.register(forward_tool()).unwrap();
    let e = d
        .dispatch("forward", json!({"cents": 5}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ToolFailed);
    assert_eq!(e.message, "the nested call of 5 cents");
    assert_eq!(e.response(), Some(&json!({"nested": true})));
    assert!(e.retryable());
}

macro_rules! suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            fn store() -> Arc<dyn IdempotencyStore> {
                $make
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn three_calls() {
                three_calls_run_once_and_replay_the_typed_output(store()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn shared_state() {
                a_tool_with_shared_state_runs_once(store()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_input() {
                a_bad_input_is_refused_before_any_claim(store()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn explicit_key() {
                an_explicit_typed_key_names_the_call(store()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn question_mark() {
                errors_through_question_mark_are_tool_failures(store()).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tool_error_kept() {
                a_tool_error_keeps_what_it_says_through_any_error_type(store()).await
            }
        }
    };
}

suite!(memory, Arc::new(MemoryStore::new()));
suite!(postgres, Arc::new(PgStore::new(pool())));

/// What an agent runtime is shown: each tool's name, its description (given, or its doc
/// comment), its input's schema from its type, and whether repeats are deduplicated.
#[test]
fn the_listing_shows_each_tool_with_its_schema() {
    let d = Dispatcher::in_memory();
    d.register(send_email_tool()).unwrap();
    d.register(place_order_tool()).unwrap();
    d.register(read_template_tool()).unwrap();
    let infos = d.tool_infos();
    let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["place_order", "read_template", "send_email"]);

    let send = &infos[2];
    assert_eq!(send.description.as_deref(), Some("Send an email"));
    let schema = send.input_schema.as_ref().expect("a typed tool's schema");
    assert_eq!(schema["properties"]["to"]["type"], "string");
    assert_eq!(
        schema["properties"]["to"]["description"],
        "The recipient's address."
    );
    assert_eq!(schema["required"], json!(["to", "subject"]));
    assert!(send.deduplicated);

    // The doc comment, all of it, when the attribute gives no description.
    assert!(infos[0]
        .description
        .as_deref()
        .is_some_and(|d| d.starts_with("Place an order.\n\nA rejected order stays rejected")));
    assert_eq!(
        infos[0].input_schema.as_ref().unwrap()["properties"]["quantity"]["type"],
        "integer"
    );
    // No settings anywhere: its calls are not deduplicated.
    assert!(!infos[1].deduplicated);

    // MCP's field names, so that the list answers `tools/list`.
    let listed = serde_json::to_value(&infos[2]).unwrap();
    assert_eq!(listed["inputSchema"], *schema);
    assert_eq!(listed["description"], "Send an email");
}

/// The function stays a function: a test (or another tool) calls it directly.
#[tokio::test]
async fn the_function_stays_callable() {
    let to = unique("bob") + "@example.com";
    let sent = send_email(
        SendEmail {
            to: to.clone(),
            subject: "Hi".into(),
        },
        CallContext::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        sent,
        Sent {
            email_id: 1,
            key: None
        }
    );
}

/// A typed tool built without the attribute: a closure, its input refused when called
/// directly as well.
#[tokio::test]
async fn a_closure_is_a_typed_tool() {
    let spec = ToolSpec::typed("double", |n: u32| async move { Ok::<_, ToolError>(n * 2) });
    assert_eq!(spec.input_schema.as_ref().unwrap()["type"], "integer");
    assert_eq!(spec.tool.call(json!(21)).await.unwrap(), json!(42));
    let e = spec.tool.call(json!("21")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("invalid type"), "{}", e.message);
}
