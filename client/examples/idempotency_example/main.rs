//! The Java framework's `IdempotencyExample` as one program (example.rs holds it; this runs
//! it): each behaviour the example shows, against PostgreSQL and a local mail provider.
//!
//!   cargo run -p pg_idempotency_client --example idempotency_example -- "<conninfo of a database with pg_idempotency>"
//!
//! Scopes are the tools' names (`create_issue`, `place_order`, `send_email`) and the keys
//! are made unique per run, so that it can be run again on the same database.

mod example;
mod mail_service;

use std::sync::Arc;

use pg_idempotency_client::*;
use serde_json::json;

type Run = std::result::Result<(), Box<dyn std::error::Error>>;

fn show(what: &str, answer: &Result<Dispatched>) {
    match answer {
        Ok(Dispatched::Ran(v)) => println!("{what}: ran: {v}"),
        Ok(Dispatched::Replayed(v)) => println!("{what}: replayed the first run's result: {v}"),
        Ok(Dispatched::InProgress { .. }) => println!("{what}: in progress elsewhere"),
        Err(e) => println!("{what}: {:?}: {e}", e.kind),
    }
}

#[tokio::main]
async fn main() -> Run {
    let dsn = std::env::args()
        .nth(1)
        .ok_or("usage: idempotency_example <conninfo>")?;
    let config: tokio_postgres::Config = dsn.parse()?;
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(4)
        .build()?;
    let store = example::postgres(pool).await?;
    let mail = mail_service::MailService::start().await?;
    let backend = Arc::new(example::Backend::default());
    let (tools, web) = example::with_store(store.clone(), backend.clone(), &mail.endpoint)?;
    let run = uuid::Uuid::new_v4().simple().to_string();

    println!("create_issue, keyed by the lower-cased title for a day:");
    let title = format!("Crash on start {run}");
    for title in [title.clone(), title.to_uppercase()] {
        let input = json!({"title": title, "body": "steps to reproduce"});
        show(
            "  create_issue",
            &tools.dispatch("create_issue", input).await,
        );
    }
    println!(
        "  issues opened: {}",
        backend.issues.lock().map(|i| i.len()).unwrap_or(0)
    );

    println!("place_order, failures cached, repeats refused (FAIL_FAST):");
    let order = json!({"sku": format!("sku-{run}"), "quantity": 0});
    for _ in 0..2 {
        show(
            "  place_order",
            &tools.dispatch("place_order", order.clone()).await,
        );
    }
    println!(
        "  orders the shop was asked for: {}",
        backend.orders.lock().map(|o| o.len()).unwrap_or(0)
    );

    println!("send_email, a POST keyed by messageId for a day:");
    let email = json!({"messageId": format!("msg-{run}"), "to": "ann@example.com", "subject": "Hi", "body": "Hello"});
    for _ in 0..2 {
        show(
            "  send_email",
            &web.execute("send_email", email.clone()).await,
        );
    }
    for r in mail.received() {
        println!(
            "  the provider got {} to {} with Idempotency-Key {:?}",
            r.method, r.body["to"], r.idempotency_key
        );
    }

    println!("kept for a day after completion (one store for tools and web actions):");
    for (scope, key) in [
        ("create_issue", title.to_lowercase()),
        ("send_email", format!("msg-{run}")),
    ] {
        if let Some(r) = store.lookup(scope, &key).await? {
            let kept = r
                .expires_at
                .duration_since(r.completed_at.unwrap_or(r.created_at))?;
            println!(
                "  {scope}: {:?}, kept {} h after completion",
                r.state,
                kept.as_secs() / 3600
            );
        }
    }
    Ok(())
}
