use pg_idempotency_client::{tool, ToolError};

#[tool(idempotent)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
