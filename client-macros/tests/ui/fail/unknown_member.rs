use pg_idempotency_client::{tool, ToolError};

/// Send an email.
#[tool(idempotency_hint = required)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
