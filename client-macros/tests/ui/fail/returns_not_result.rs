use pg_idempotency_client::tool;

/// Send an email.
#[tool]
async fn send_email(to: String) -> String {
    to
}

fn main() {}
