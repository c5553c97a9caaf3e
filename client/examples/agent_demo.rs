//! An agent's `send_email` tool behind pg_idempotency: retried, duplicated and crashed,
//! it sends each email once. Every email is a row in an `outbox` table, so the side effects
//! are counted, not claimed; the tool is exactly-once (`ExactlyOnce`): its claim, its
//! outbox row and its completion commit or roll back in one transaction. Run by
//! `scripts/demo.sh`:
//!
//!   cargo run -p pg_idempotency_client --example agent_demo -- "<conninfo of a database with the extension>"

use std::sync::Arc;
use std::time::Duration;

use idempotency::*;
use serde_json::{json, Value};

type Demo = std::result::Result<(), Box<dyn std::error::Error>>;

fn pool(dsn: &str) -> std::result::Result<deadpool_postgres::Pool, Box<dyn std::error::Error>> {
    let config: tokio_postgres::Config = dsn.parse()?;
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    Ok(deadpool_postgres::Pool::builder(manager)
        .max_size(8)
        .build()?)
}

/// The tool: sends an email (a row in the outbox, in the caller's transaction) after the
/// provider's `delay`.
fn send_email(delay: Duration) -> Arc<dyn TxTool> {
    tx_tool_fn(move |tx, input| {
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let row = tx
                .query_one(
                    "INSERT INTO outbox (recipient, subject) VALUES ($1, $2) RETURNING id",
                    &[&input["to"].as_str(), &input["subject"].as_str()],
                )
                .await?;
            Ok(json!({"email_id": row.get::<_, i32>(0)}))
        })
    })
}

/// One call of send_email in a transaction of its own, committed.
async fn send(
    pool: &deadpool_postgres::Pool,
    tools: &ExactlyOnce,
    input: &Value,
) -> Result<Dispatched> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let sent = tools.dispatch_in(&tx, "send_email", input.clone()).await?;
    tx.commit().await?;
    Ok(sent)
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
    let tools = Arc::new(ExactlyOnce::new());
    tools.register(
        TxToolSpec::new("send_email", send_email(Duration::from_millis(1500)))
            .idempotent(Idempotent::new()),
    )?;

    println!("\n1. The agent calls send_email; its retry loop calls it twice more.");
    let welcome = json!({"to": "ann@example.com", "subject": "Welcome"});
    for n in 1..=3 {
        println!(
            "   call {n}: {}",
            show(&send(&pool, &tools, &welcome).await)
        );
    }
    println!(
        "   emails in the outbox: {}   <- three calls, one email",
        emails(&pool).await?
    );

    println!("\n2. A duplicate arrives while the first call is still sending (the provider takes 1.5 s).");
    let invoice = json!({"to": "ann@example.com", "subject": "Your invoice"});
    let first = {
        let (pool, tools, invoice) = (pool.clone(), tools.clone(), invoice.clone());
        tokio::spawn(async move { send(&pool, &tools, &invoice).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Its claim is not committed yet: the duplicate waits on it, then sees the result.
    let duplicate = send(&pool, &tools, &invoice).await;
    println!("   the first call: {}", show(&first.await?));
    println!(
        "   the duplicate, which waited for the first call's transaction: {}",
        show(&duplicate)
    );
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
        show(&send(&pool, &tools, &reset).await)
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    println!(
        "   a retry after the lease lapsed: {}",
        show(&send(&pool, &tools, &reset).await)
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

    println!("\n4. A process crashes inside its transaction, after writing the outbox row and before committing.");
    let receipt = json!({"to": "ann@example.com", "subject": "Your receipt"});
    {
        let mut client = pool.get().await?;
        let tx = client.transaction().await?;
        println!(
            "   in its transaction: {}",
            show(&tools.dispatch_in(&tx, "send_email", receipt.clone()).await)
        );
        // The crash: the transaction ends without a commit, its connection with it.
        drop(tx);
        drop(deadpool_postgres::Object::take(client));
    }
    println!(
        "   emails in the outbox: {}   <- the row went with the claim",
        emails(&pool).await?
    );
    println!(
        "   a retry right away: {}",
        show(&send(&pool, &tools, &receipt).await)
    );
    println!("   emails in the outbox: {}", emails(&pool).await?);
    Ok(())
}
