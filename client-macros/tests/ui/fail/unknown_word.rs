use pg_idempotency_client::{tool, ToolError};

/// Place an order.
#[tool(idempotent(on_cache_hit = return_cache))]
async fn place_order(sku: String) -> Result<String, ToolError> {
    Ok(sku)
}

fn main() {}
