//! An agent's tools behind pg_idempotency: retried, duplicated and crashed, each effect
//! happens once, and is counted, not claimed.
//!
//! - `send_email` writes a row in an `outbox` table, exactly once (`ExactlyOnce`): its
//!   claim, its outbox row and its completion commit or roll back in one transaction
//!   (parts 1 to 4);
//! - `create_charge` is a web action against an authenticated payments API, with the
//!   caller's HTTP client and a bearer token per call (part 5);
//! - `charge_card` is a typed tool (`#[pg_idempotency_client::tool]`) whose takeover after a crash
//!   asks the provider what the crashed attempt did instead of charging again (part 6).
//!
//! Run by `scripts/demo.sh`:
//!
//!   cargo run -p pg_idempotency_client --example agent_demo -- "<conninfo of a database with the extension>"

mod provider;

use std::sync::Arc;
use std::time::Duration;

use pg_idempotency_client::*;
use serde::{Deserialize, Serialize};
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
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&reset)?);
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

    let (base, charges) = provider::start().await?;
    payments(&store, &base, &charges).await?;
    unknown_outcome(&store, &base, &charges).await?;
    Ok(())
}

/// Part 5: a web action against an API that wants a bearer token.
async fn payments(
    store: &Arc<PgStore<deadpool_postgres::Pool>>,
    base: &str,
    charges: &provider::Charges,
) -> Demo {
    println!("\n5. The agent charges a card through an authenticated payments API (a web action).");
    // The caller's own HTTP client (its timeouts, TLS, user agent); the token comes per call.
    let http = reqwest::Client::builder()
        .user_agent("agent-demo/1.0")
        .timeout(Duration::from_secs(10))
        .build()?;
    let web = WebExecutor::new(store.clone()).with_http_client(http);
    web.register(Action::new(
        "create_charge",
        Method::POST,
        format!("{base}/v1/customers/{{customer}}/charges"),
    ))?;
    let charge = json!({"customer": "cus_ann", "amount_cents": 1200});
    let no_token = web.execute("create_charge", charge.clone()).await;
    println!("   without a token:   {}", show(&no_token));
    for n in 1..=3 {
        let sent = web
            .execute_call(
                "create_charge",
                charge.clone(),
                Headers::new().bearer(provider::API_KEY),
            )
            .await;
        println!("   call {n}, with it:  {}", show(&sent));
    }
    println!(
        "   charges of cus_ann at the provider: {}   <- three calls, one charge (the token is never stored)",
        charges.count("cus_ann")
    );
    Ok(())
}

/// What `charge_card` is asked for.
#[derive(Deserialize, Serialize, schemars::JsonSchema)]
struct ChargeCard {
    /// The provider's customer id.
    customer: String,
    amount_cents: u32,
}

/// The payments API as the tool reaches it: its base URL and a client that sends the key.
#[derive(Clone)]
struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(base: &str) -> std::result::Result<Api, reqwest::Error> {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            reqwest::header::HeaderValue::from_static("Bearer sk_demo"),
        );
        Ok(Api {
            base: base.to_string(),
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()?,
        })
    }

    /// Charges the card, naming the charge by the call's upstream key (the same on every
    /// attempt, a takeover included).
    async fn charge(&self, c: &ChargeCard, reference: &str) -> reqwest::Result<Value> {
        self.http
            .post(format!("{}/v1/customers/{}/charges", self.base, c.customer))
            .json(&json!({"amount_cents": c.amount_cents, "reference": reference}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }

    /// The charge an earlier attempt made under `reference`, if any.
    async fn find(&self, reference: &str) -> reqwest::Result<Option<Value>> {
        let found = self
            .http
            .get(format!("{}/v1/charges", self.base))
            .query(&[("reference", reference)])
            .send()
            .await?;
        if found.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        Ok(Some(found.error_for_status()?.json().await?))
    }
}

/// Charge a customer's card.
#[pg_idempotency_client::tool(idempotent(ttl_secs = 86_400), required)]
async fn charge_card(
    Shared(api): Shared<Api>,
    input: ChargeCard,
    ctx: CallContext,
) -> std::result::Result<Value, ToolError> {
    // A holder that lost its lease must not charge: another attempt may be doing it.
    ctx.ensure_lease()?;
    let reference = ctx.upstream_key.map(|u| u.to_string()).unwrap_or_default();
    Ok(api
        .charge(&input, &reference)
        .await
        .map_err(ToolError::of)?)
}

/// Part 6: a typed tool taken over after a crash, under the reconcile choice.
async fn unknown_outcome(
    store: &Arc<PgStore<deadpool_postgres::Pool>>,
    base: &str,
    charges: &provider::Charges,
) -> Demo {
    println!("\n6. charge_card, a typed tool: a process charges the card and crashes before recording it.");
    let api = Api::new(base)?;
    let agent = Dispatcher::new(store.clone());
    let spec = charge_card_tool(api.clone());
    // The unknown-outcome choice: ask the provider for a charge under the call's upstream key.
    let reader = api.clone();
    let reconcile = Idempotent::new().reconcile(move |call: Reconcile| {
        let reader = reader.clone();
        async move {
            Ok(match reader.find(&call.upstream_key.to_string()).await {
                Ok(Some(charge)) => Reconciled::Found(charge),
                Ok(None) => Reconciled::NotFound,
                Err(_) => Reconciled::Unknown,
            })
        }
    });
    let settings = reconcile.or(spec.idempotent.as_ref().unwrap_or(&Idempotent::new()));
    agent.register(spec.idempotent(settings))?;
    for info in agent.tool_infos() {
        println!(
            "   registered {}: \"{}\", input schema fields {:?}",
            info.name,
            info.description.unwrap_or_default(),
            info.input_schema
                .as_ref()
                .and_then(|s| s["properties"].as_object())
                .map(|p| p.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        );
    }
    let input = ChargeCard {
        customer: "cus_bob".into(),
        amount_cents: 4900,
    };
    let call = serde_json::to_value(&input)?;
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&call)?);
    // The crashed process: claimed the call with a 1 s lease, charged, and died.
    let Begin::Claimed(crashed) = store
        .begin(
            "charge_card",
            &key,
            &BeginOptions {
                request: Some(call.clone()),
                lease: Some(Duration::from_secs(1)),
                ..BeginOptions::default()
            },
        )
        .await?
    else {
        return Err("the demo's call was already claimed: run it on a fresh database".into());
    };
    api.charge(&input, &crashed.upstream_key.to_string())
        .await?;
    println!(
        "   the crashed process charged under its upstream key {}; charges of cus_bob: {}",
        crashed.upstream_key,
        charges.count("cus_bob")
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    println!(
        "   the agent retries after the lease lapsed: {}",
        show(&agent.dispatch("charge_card", call.clone()).await)
    );
    println!(
        "   and again: {}",
        show(&agent.dispatch("charge_card", call).await)
    );
    println!(
        "   charges of cus_bob at the provider: {}   <- the takeover found the crashed attempt's charge instead of charging again",
        charges.count("cus_bob")
    );
    Ok(())
}
