use pg_idempotency_client::{tool, ToolError};

/// Search.
#[tool(read_only, required)]
async fn search(query: String) -> Result<String, ToolError> {
    Ok(query)
}

fn main() {}
