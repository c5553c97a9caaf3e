//! The Rust client's cost per call over the raw SQL it sends: the same claim + complete of
//! a new key through `PgStore` (a deadpool pool, statements cached per connection), through
//! the tool `Dispatcher` (key from the input's canonical hash, lease heartbeat, a no-op
//! tool) and through `MemoryStore` (no database: what the client's own code costs), each
//! beside `idem_begin` + `idem_complete` prepared on a plain connection; and `PgStore` with
//! unnamed statements (what a pooler in transaction mode needs) beside `PgStore` with its
//! default, named statements cached per connection.

use std::sync::Arc;

use pg_idempotency_client::{
    tool_fn, Begin, BeginOptions, Dispatcher, IdempotencyStore, Idempotent, MemoryStore, PgStore,
    StatementMode, ToolSpec,
};
use serde_json::{json, Value};

use super::calls::claim_complete;
use super::Row;
use crate::harness::{compare, fresh_key, BenchResult, Op, Plan};

fn pool(dsn: &str, size: usize) -> BenchResult<deadpool_postgres::Pool> {
    let config: tokio_postgres::Config = dsn.parse()?;
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    Ok(deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .build()?)
}

fn through_store(store: Arc<dyn IdempotencyStore>) -> Op {
    Arc::new(move |_, _| {
        let store = store.clone();
        Box::pin(async move {
            let key = fresh_key("client");
            let response = json!({"ok": true});
            match store.begin("bench", &key, &BeginOptions::default()).await? {
                Begin::Claimed(claim) => {
                    store
                        .complete("bench", &key, claim.fence, Some(&response), true, None)
                        .await?;
                    Ok(())
                }
                other => Err(format!("a new key was not claimed: {other:?}").into()),
            }
        })
    })
}

fn through_dispatcher(dispatcher: Arc<Dispatcher>) -> Op {
    Arc::new(move |_, _| {
        let dispatcher = dispatcher.clone();
        Box::pin(async move {
            let input = json!({"to": "ann@example.com", "call": fresh_key("dispatch")});
            dispatcher.dispatch("bench_tool", input).await?;
            Ok(())
        })
    })
}

pub async fn run(dsn: &str, plan: Plan) -> BenchResult<Vec<Row>> {
    let pool = pool(dsn, plan.clients)?;
    let pg: Arc<dyn IdempotencyStore> = Arc::new(PgStore::new(pool.clone()));
    let unnamed: Arc<dyn IdempotencyStore> =
        Arc::new(PgStore::new(pool).statement_mode(StatementMode::Unnamed));
    let dispatcher = Arc::new(Dispatcher::new(pg.clone()));
    dispatcher.register(
        ToolSpec::new(
            "bench_tool",
            tool_fn(|_: Value| async { Ok(json!({"sent": true})) }),
        )
        .idempotent(Idempotent::new()),
    )?;
    let memory: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::new());

    let raw = "`idem_begin` + `idem_complete`, raw SQL";
    let mut rows = Vec::new();
    // Both over one pool: the named statements are prepared once per connection in the
    // warm-up, the unnamed ones parsed and planned at every call.
    let (ours, baseline) =
        compare(dsn, plan, through_store(unnamed), through_store(pg.clone())).await?;
    rows.push(Row {
        workload: "Rust client, new keys".into(),
        ours_name: "`PgStore` begin + complete, unnamed statements (for a pooler)".into(),
        baseline_name: "`PgStore` begin + complete, prepared statements (the default)".into(),
        ours,
        baseline,
        goal: None,
    });
    for (name, op) in [
        ("`PgStore` begin + complete", through_store(pg)),
        (
            "`Dispatcher::dispatch` over `PgStore`, no-op tool",
            through_dispatcher(dispatcher),
        ),
        (
            "`MemoryStore` begin + complete (no database)",
            through_store(memory),
        ),
    ] {
        let (ours, baseline) = compare(dsn, plan, op, claim_complete()).await?;
        rows.push(Row {
            workload: "Rust client, new keys".into(),
            ours_name: name.into(),
            baseline_name: raw.into(),
            ours,
            baseline,
            goal: None,
        });
    }
    Ok(rows)
}
