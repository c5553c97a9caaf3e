//! The Java framework's `IdempotencyExample`, as a Rust user writes it: the `IssueTools`
//! toolkit (`create_issue` keyed by its lower-cased title for a day, `place_order` with
//! its failures cached and repeats refused), the mail role's `send_email` web action
//! (POST, keyed by `messageId` for a day), and one durable store for both paths.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pg_idempotency_client::*;
use serde::Deserialize;

const DAY: Duration = Duration::from_secs(86_400);

/// What the tools act on: the issue tracker and the order book (here, two lists).
#[derive(Default)]
pub struct Backend {
    pub issues: Mutex<Vec<String>>,
    /// Every order the shop was asked to place, the rejected ones included.
    pub orders: Mutex<Vec<String>>,
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct CreateIssue {
    /// Issue title
    pub title: String,
    /// Issue body
    pub body: String,
}

/// Create an issue in the tracker.
#[pg_idempotency_client::tool(idempotent(strategy = explicit, ttl_secs = 86_400))]
pub async fn create_issue(
    Shared(backend): Shared<Arc<Backend>>,
    input: CreateIssue,
) -> Result<String, ToolError> {
    let mut issues = backend
        .issues
        .lock()
        .map_err(|_| ToolError::new("tracker"))?;
    issues.push(format!("{}: {}", input.title, input.body));
    Ok(format!("created: {}", input.title))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub struct PlaceOrder {
    /// Product SKU
    pub sku: String,
    /// Quantity
    pub quantity: i64,
}

/// Place an order. A rejected order stays rejected: cache the failure and refuse the repeat.
#[pg_idempotency_client::tool(idempotent(strategy = hash_input, cache_failures, on_cache_hit = fail_fast))]
pub async fn place_order(
    Shared(backend): Shared<Arc<Backend>>,
    input: PlaceOrder,
) -> Result<String, ToolError> {
    let mut orders = backend
        .orders
        .lock()
        .map_err(|_| ToolError::new("order book"))?;
    orders.push(input.sku.clone());
    if input.quantity <= 0 {
        return Err(ToolError::new(format!(
            "rejected: quantity {}",
            input.quantity
        )));
    }
    Ok(format!("ordered {} x {}", input.quantity, input.sku))
}

/// A toolkit that supplies its own key for Explicit tools: same title, same issue (body
/// edits do not create a second one).
pub fn issue_tools(backend: Arc<Backend>) -> Toolkit {
    Toolkit::new("IssueTools")
        .key_supplier(|input| input["title"].as_str().map(str::to_lowercase))
        .tool(create_issue_tool(backend.clone()))
        .tool(place_order_tool(backend))
}

/// A role supplies the key for its Explicit web actions: the message's own id.
pub fn mail_role(emails_endpoint: &str) -> Toolkit<Action> {
    Toolkit::service("mail")
        .key_supplier(|input| input["messageId"].as_str().map(str::to_string))
        .action(
            Action::new("send_email", Method::POST, emails_endpoint)
                .idempotent(Idempotent::new().explicit().ttl(DAY)),
        )
}

/// One durable store for both paths: tools and web actions.
pub fn with_store(
    store: Arc<dyn IdempotencyStore>,
    backend: Arc<Backend>,
    emails_endpoint: &str,
) -> Result<(Dispatcher, WebExecutor)> {
    let tools = Dispatcher::new(store.clone());
    tools.register_toolkit(issue_tools(backend))?;
    let web = WebExecutor::new(store);
    web.register_toolkit(mail_role(emails_endpoint))?;
    Ok((tools, web))
}

/// The durable store: PostgreSQL with pg_idempotency installed (`CREATE EXTENSION`, or the
/// portable SQL, by your migrations).
pub async fn postgres(pool: deadpool_postgres::Pool) -> Result<Arc<dyn IdempotencyStore>> {
    let store = PgStore::new(pool);
    store.check_installed().await?;
    Ok(Arc::new(store))
}
