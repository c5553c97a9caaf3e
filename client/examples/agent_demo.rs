//! An agent's `send_email` tool behind pg_idempotency: retried, duplicated and crashed,
//! it sends each email once. Every email is a row in an `outbox` table, so the side effects
//! are counted, not claimed. Run by `scripts/demo.sh`:
//!
//!   cargo run -p pg_idempotency_client --example agent_demo -- "<conninfo of a database with the extension>"

use std::sync::Arc;
use std::time::Duration;

use idempotency::*;
use serde_json::json;

type Demo = std::result::Result<(), Box<dyn std::error::Error>>;

fn pool(dsn: &str) -> std::result::Result<deadpool_postgres::Pool, Box<dyn std::error::Error>> {
    let config: tokio_postgres::Config = dsn.parse()?;
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    Ok(deadpool_postgres::Pool::builder(manager)
        .max_size(8)
        .build()?)
}

/// The tool's input, decoded from the agent's JSON (a bad one is refused before anything is
/// claimed).
#[derive(serde::Deserialize)]
struct Email {
    to: String,
    subject: String,
}

/// The tool: sends an email (a row in the outbox) after the provider's `delay`.
fn send_email(pool: deadpool_postgres::Pool, delay: Duration) -> Arc<dyn Tool> {
    typed_tool(move |email: Email| {
        let pool = pool.clone();
        async move {
            tokio::time::sleep(delay).await;
            let c = pool.get().await?;
            let id: i32 = c
                .query_one(
                    "INSERT INTO outbox (recipient, subject) VALUES ($1, $2) RETURNING id",
                    &[&email.to, &email.subject],
                )
                .await?
                .get(0);
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(json!({"email_id": id}))
        }
    })
}

fn show(d: &Result<Dispatched>) -> String {
    match d {
        Ok(Dispatched::Ran(v)) => format!("ran the tool: {v}"),
        Ok(Dispatched::Replayed(v)) => format!("replayed the first run's result: {v}"),
        Ok(Dispatched::InProgress { retry_after }) => format!(
            "in progress elsewhere; retry in {:.1} s",
            retry_after.as_secs_f64()
        ),
        Err(e) => format!("error {:?}: {e}", e.kind),
    }
}

async fn emails(
    pool: &deadpool_postgres::Pool,
) -> std::result::Result<i64, Box<dyn std::error::Error>> {
    Ok(pool
        .get()
        .await?
        .query_one("SELECT count(*) FROM outbox", &[])
        .await?
        .get(0))
}

#[tokio::main]
async fn main() -> Demo {
    let dsn = std::env::args()
        .nth(1)
        .ok_or("usage: agent_demo <conninfo>")?;
    let pool = pool(&dsn)?;
    pool.get().await?.batch_execute("CREATE TABLE IF NOT EXISTS outbox (id serial PRIMARY KEY, recipient text, subject text)").await?;
    let store = Arc::new(PgStore::new(pool.clone()));
    store.check_installed().await?;
    let agent = Arc::new(Dispatcher::new(store.clone()));
    // Its settings (HashInput, the server's ttl): a tool without any is not deduplicated.
    agent.register(
        ToolSpec::new(
            "send_email",
            send_email(pool.clone(), Duration::from_millis(1500)),
        )
        .idempotent(Idempotent::new()),
    )?;

    println!("\n1. The agent calls send_email; its retry loop calls it twice more.");
    let welcome = json!({"to": "ann@example.com", "subject": "Welcome"});
    for n in 1..=3 {
        println!(
            "   call {n}: {}",
            show(&agent.dispatch("send_email", welcome.clone()).await)
        );
    }
    println!(
        "   emails in the outbox: {}   <- three calls, one email",
        emails(&pool).await?
    );

    println!("\n2. A duplicate arrives while the first call is still sending (the provider takes 1.5 s).");
    let invoice = json!({"to": "ann@example.com", "subject": "Your invoice"});
    let first = {
        let (agent, invoice) = (agent.clone(), invoice.clone());
        tokio::spawn(async move { agent.dispatch("send_email", invoice).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    println!(
        "   the duplicate:  {}",
        show(&agent.dispatch("send_email", invoice.clone()).await)
    );
    // The server's estimate of the running call's time left paces the retries.
    let retried = Retry {
        attempts: 20,
        base: Duration::from_millis(100),
        max: Duration::from_millis(500),
    }
    .run(|| async {
        Ok(agent
            .dispatch("send_email", invoice.clone())
            .await?
            .attempt())
    })
    .await;
    println!("   the first call: {}", show(&first.await?));
    println!("   the duplicate, retrying when told: {}", show(&retried));
    println!("   emails in the outbox: {}", emails(&pool).await?);

    println!("\n3. An agent process claims a call and crashes; its 1 s lease lapses and the call is taken over.");
    let reset = json!({"to": "ann@example.com", "subject": "Password reset"});
    let key = canon::key_of(&canon::hash_value(&reset)?);
    let crashed = store
        .begin(
            "send_email",
            &key,
            &BeginOptions {
                request: Some(reset.clone()),
                lease: Some(Duration::from_secs(1)),
                ..BeginOptions::default()
            },
        )
        .await?;
    if let Begin::Claimed(c) = &crashed {
        println!(
            "   the crashed process had claimed it: fence {}, upstream key {}",
            c.fence, c.upstream_key
        );
    }
    println!(
        "   a retry right away: {}",
        show(&agent.dispatch("send_email", reset.clone()).await)
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    println!(
        "   a retry after the lease lapsed: {}",
        show(&agent.dispatch("send_email", reset.clone()).await)
    );
    if let Some(r) = store.lookup("send_email", &key).await? {
        println!("   the record: attempt {}, upstream key {} (the same: a provider deduplicating on it sees one request)", r.attempt, r.upstream_key);
    }
    if let Begin::Claimed(c) = crashed {
        let late = store
            .complete(
                "send_email",
                &key,
                c.fence,
                Some(&json!({"email_id": 99})),
                true,
                None,
            )
            .await;
        println!(
            "   the crashed process comes back with its old fence: {}",
            late.map(|_| "accepted?!".to_string())
                .unwrap_or_else(|e| format!("refused, {:?}", e.kind))
        );
    }
    println!("   emails in the outbox: {}", emails(&pool).await?);
    Ok(())
}
