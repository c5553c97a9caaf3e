use pg_idempotency_client::{tool, CallContext, KeyStrategy, OnCacheHit, OnMismatch, ToolError};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct CreateIssue {
    pub title: String,
}

#[derive(Serialize)]
pub struct Created {
    pub id: u64,
}

fn issue_key(issue: &CreateIssue) -> String {
    issue.title.to_lowercase()
}

#[tool(
    name = "create_issue",
    description = "Create an issue in the tracker",
    idempotent(
        key = issue_key,
        ttl_secs = 86_400,
        on_cache_hit = return_cached_if_success,
        cache_failures,
        on_mismatch = ignore,
        lease_secs = 30,
        timeout_secs = 60,
        wait_secs = 5
    ),
    required
)]
pub async fn create(input: CreateIssue, ctx: CallContext) -> Result<Created, ToolError> {
    let _ = (input.title, ctx.attempt);
    Ok(Created { id: 1 })
}

/// Place an order.
#[tool(idempotent(strategy = explicit, cache_failures = true, on_cache_hit = fail_fast))]
async fn place_order(input: String) -> Result<String, std::io::Error> {
    Ok(input)
}

/// Search the tracker.
#[tool(read_only)]
async fn search(query: String) -> boxed::Result<Vec<String>> {
    Ok(vec![query])
}

/// Every call anew, with a fresh key for the provider.
#[tool(idempotent(strategy = uuid))]
async fn notify(input: u32) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _ = input;
    Ok(())
}

/// With state of its own: built by `count_tool(counter)`.
#[tool(idempotent)]
async fn count(
    pg_idempotency_client::Shared(counter): pg_idempotency_client::Shared<
        std::sync::Arc<std::sync::atomic::AtomicU32>,
    >,
    page: String,
) -> Result<u32, ToolError> {
    let _ = page;
    Ok(counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

/// Nothing remembered.
#[tool(idempotent)]
async fn plain(input: u32) -> Result<u32, String> {
    Ok(input)
}

mod boxed {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

pub fn main() {
    let specs = [
        create_tool(),
        place_order_tool(),
        search_tool(),
        notify_tool(),
        plain_tool(),
        count_tool(Default::default()),
    ];
    assert_eq!(specs[0].name, "create_issue");
    assert!(specs[0].requires_idempotency());
    assert!(!specs[2].side_effect);

    // Each member lands on its setting.
    let secs = std::time::Duration::from_secs;
    let create = specs[0].idempotent.as_ref().unwrap();
    let Some(KeyStrategy::Explicit(Some(key))) = &create.strategy else {
        panic!("create_issue's own key supplier: {:?}", create.strategy);
    };
    assert_eq!(
        key(&serde_json::json!({"title": "Crash"})).as_deref(),
        Some("crash")
    );
    assert_eq!(create.ttl, Some(secs(86_400)));
    assert_eq!(create.on_cache_hit, Some(OnCacheHit::ReturnCachedIfSuccess));
    assert_eq!(create.cache_failures, Some(true));
    assert_eq!(create.on_mismatch, Some(OnMismatch::Ignore));
    assert_eq!(
        (create.lease, create.timeout, create.wait),
        (Some(secs(30)), Some(secs(60)), Some(secs(5)))
    );
    let order = specs[1].idempotent.as_ref().unwrap();
    assert!(matches!(order.strategy, Some(KeyStrategy::Explicit(None))));
    assert_eq!(order.on_cache_hit, Some(OnCacheHit::FailFast));
    assert!(specs[2].idempotent.is_none());
    let notify = specs[3].idempotent.as_ref().unwrap();
    assert!(matches!(notify.strategy, Some(KeyStrategy::Uuid)));
    let plain = specs[4].idempotent.as_ref().unwrap();
    assert!(plain.strategy.is_none() && plain.ttl.is_none());
}
