//! The store the proxy keeps its records in: `PgStore`s over deadpool pools of one
//! database, behind the waiters' gate (mcp/src/split_store.rs).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use deadpool_postgres::{Pool, Runtime};
use pg_idempotency_client::{ApiSchema, IdempotencyStore, PgStore, StatementMode};

use crate::config::Database;
use crate::limits::Limits;
use crate::split_store::SplitStore;
use crate::waiters::Gate;

pub async fn connect(db: &Database, limits: &Limits) -> Result<Arc<dyn IdempotencyStore>> {
    let url = db
        .url
        .clone()
        .or_else(|| std::env::var("PGIDEM_MCP_DATABASE_URL").ok())
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .context("no database: set [database] url, or PGIDEM_MCP_DATABASE_URL or DATABASE_URL")?;
    let pg: tokio_postgres::Config = url
        .parse()
        .context("the database url is neither a libpq connection string nor a postgres:// URL")?;
    let wait = limits.pool_wait_timeout();
    // Every call names the API's schema, so that nothing on the connection's search_path
    // can stand in for our functions.
    let schema = db.schema.as_deref().unwrap_or(ApiSchema::DEFAULT);
    let mode: StatementMode = match db
        .statements
        .clone()
        .or_else(|| std::env::var("PGIDEM_MCP_STATEMENTS").ok())
    {
        Some(word) => word.parse().context("[database] statements")?,
        None => StatementMode::default(),
    };
    let calls = PgStore::new(pool(&pg, db.pool_size(), wait)?)
        .statement_mode(mode)
        .schema(schema)
        .context("[database] schema")?;
    calls.check_installed().await.with_context(|| {
        format!("the database does not have pg_idempotency's SQL API in the schema {schema:?}")
    })?;
    let holders = PgStore::new(pool(&pg, limits.heartbeat_connections(), wait)?)
        .statement_mode(mode)
        .schema(schema)
        .context("[database] schema")?;
    Ok(Arc::new(SplitStore {
        calls: Arc::new(calls),
        holders: Arc::new(holders),
        gate: Gate::new(
            limits.max_waiting_per_principal(),
            limits.max_waiting(db.pool_size()),
        ),
    }))
}

/// A pool of `size` connections whose callers wait at most `wait` for one (deadpool's
/// `Timeouts::wait`): past it, a call is answered `store_unavailable` rather than hanging.
fn pool(pg: &tokio_postgres::Config, size: usize, wait: Duration) -> Result<Pool> {
    let manager = deadpool_postgres::Manager::new(pg.clone(), tokio_postgres::NoTls);
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(wait))
        .runtime(Runtime::Tokio1)
        .build()
        .context("cannot build the connection pool")
}
