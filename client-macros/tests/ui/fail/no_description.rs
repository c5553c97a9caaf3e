use idempotency::{tool, ToolError};

#[tool(idempotent)]
async fn send_email(to: String) -> Result<String, ToolError> {
    Ok(to)
}

fn main() {}
