use pg_idempotency_client::{tool, ToolError};

/// Send an email.
#[tool]
fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
