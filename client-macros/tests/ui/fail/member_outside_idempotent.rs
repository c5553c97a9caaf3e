use pg_idempotency_client::{tool, ToolError};

/// Send an email.
#[tool(ttl_secs = 86_400)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
