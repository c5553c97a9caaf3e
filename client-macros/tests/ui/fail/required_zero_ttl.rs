use pg_idempotency_client::{tool, ToolError};

/// Charge a card.
#[tool(idempotent(ttl_secs = 0), required)]
async fn charge_card(cents: u64) -> Result<u64, ToolError> {
    Ok(cents)
}

fn main() {}
