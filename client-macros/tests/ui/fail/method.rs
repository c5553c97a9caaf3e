use pg_idempotency_client::{tool, ToolError};

struct Mailer;

impl Mailer {
    /// Send an email.
    #[tool]
    async fn send_email(&self, to: String) -> Result<String, ToolError> {
        Ok(to)
    }
}

fn main() {}
