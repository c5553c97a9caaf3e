use pg_idempotency_client::{tool, ToolError};

/// Send an email.
#[tool]
async fn send_email(to: String, subject: String) -> Result<String, ToolError> {
    Ok(to + &subject)
}

fn main() {}
