use pg_idempotency_client::{tool, ToolError};

#[derive(serde::Deserialize)]
struct SendEmail {
    to: String,
}

/// Send an email.
#[tool]
async fn send_email(input: SendEmail) -> Result<String, ToolError> {
    Ok(input.to)
}

fn main() {}
