use pg_idempotency_client::{tool, ToolError};

/// Charge a card.
#[tool(idempotent(strategy = uuid), required)]
async fn charge_card(cents: u64) -> Result<u64, ToolError> {
    Ok(cents)
}

fn main() {}
