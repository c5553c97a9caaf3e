use pg_idempotency_client::{tool, ToolError};

/// Place an order.
#[tool(idempotent(strategy = HASH_INPUT))]
async fn place_order(sku: String) -> Result<String, ToolError> {
    Ok(sku)
}

fn main() {}
