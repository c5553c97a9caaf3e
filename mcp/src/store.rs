//! The store the proxy keeps its records in: a `PgStore` over a deadpool pool.

use std::sync::Arc;

use anyhow::{Context, Result};
use idempotency::{IdempotencyStore, PgStore};

use crate::config::Database;

pub async fn connect(db: &Database) -> Result<Arc<dyn IdempotencyStore>> {
    let url = db
        .url
        .clone()
        .or_else(|| std::env::var("PGIDEM_MCP_DATABASE_URL").ok())
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .context("no database: set [database] url, or PGIDEM_MCP_DATABASE_URL or DATABASE_URL")?;
    let pg: tokio_postgres::Config = url
        .parse()
        .context("the database url is neither a libpq connection string nor a postgres:// URL")?;
    let manager = deadpool_postgres::Manager::new(pg, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(db.pool_size.unwrap_or(8))
        .build()
        .context("cannot build the connection pool")?;
    let store = PgStore::new(pool);
    store
        .check_installed()
        .await
        .context("the database does not have pg_idempotency's SQL API")?;
    Ok(Arc::new(store))
}
