// `crate = ".."` is the path every part of the expansion names the client by: a path that
// does not exist fails there, not silently back at `::pg_idempotency_client`.
use serde::{Deserialize, Serialize};

#[derive(Deserialize, schemars::JsonSchema)]
pub struct Email {
    pub to: String,
}

#[derive(Serialize)]
pub struct Sent {
    pub id: u64,
}

/// Send an email.
#[pg_idempotency_client::tool(crate = "no_such_client")]
async fn send_email(email: Email) -> Result<Sent, pg_idempotency_client::ToolError> {
    let _ = email.to;
    Ok(Sent { id: 7 })
}

fn main() {}
