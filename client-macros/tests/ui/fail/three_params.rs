use pg_idempotency_client::{tool, CallContext, ToolError};

/// Send an email.
#[tool]
async fn send_email(to: String, ctx: CallContext, subject: String) -> Result<String, ToolError> {
    let _ = ctx;
    Ok(to + &subject)
}

fn main() {}
