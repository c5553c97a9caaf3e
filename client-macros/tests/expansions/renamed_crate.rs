// A crate that names the client by another path: `crate = ".."` is where the expansion
// finds it.
use pg_idempotency_client as idem;
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
#[idem::tool(crate = "idem", idempotent(ttl_secs = 60))]
async fn send_email(email: Email) -> Result<Sent, idem::ToolError> {
    let _ = email.to;
    Ok(Sent { id: 7 })
}

pub fn main() {
    let _spec: idem::ToolSpec = send_email_tool();
}
