//! The store the proxy keeps its records in: a `PgStore` over a deadpool pool.

use std::sync::Arc;

use anyhow::{Context, Result};
use idempotency::{ApiSchema, IdempotencyStore, PgStore};

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
    // Every call names the API's schema, so that nothing on the connection's search_path
    // can stand in for our functions.
    let schema = db.schema.as_deref().unwrap_or(ApiSchema::DEFAULT);
    let store = PgStore::new(pool)
        .schema(schema)
        .context("[database] schema")?;
    store.check_installed().await.with_context(|| {
        format!("the database does not have pg_idempotency's SQL API in the schema {schema:?}")
    })?;
    Ok(Arc::new(store))
}
