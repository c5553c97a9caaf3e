use pg_idempotency_client::{tool, ToolError};

/// Place an order.
#[tool(idempotent(ttl_secs = 60, ttl_secs = 3600))]
async fn place_order(sku: String) -> Result<String, ToolError> {
    Ok(sku)
}

fn main() {}
