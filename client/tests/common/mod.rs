//! Shared by the client's suites: the database under test and unique names.
#![allow(dead_code)]

pub mod raw_http;

use std::sync::atomic::{AtomicU32, Ordering};

/// `PGIDEM_DSN`, by default the private PostgreSQL 18 cluster's `pgidem_it` database, on
/// the port it took.
pub fn dsn() -> String {
    std::env::var("PGIDEM_DSN").unwrap_or_else(|_| {
        let root = env!("CARGO_MANIFEST_DIR").trim_end_matches("/client");
        // The port of the cluster's last start, which scripts/cluster.sh remembers (54818
        // unless another program held it or PG18_PORT said otherwise).
        let port = std::fs::read_to_string(format!("{root}/target/clusters/pg18/port"))
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok())
            .unwrap_or(54818);
        format!(
            "host={root}/target/clusters/pg18/socket port={port} user=postgres dbname=pgidem_it"
        )
    })
}

pub fn pool() -> deadpool_postgres::Pool {
    let config: tokio_postgres::Config = dsn().parse().expect("PGIDEM_DSN");
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    deadpool_postgres::Pool::builder(manager)
        .max_size(32)
        .build()
        .expect("pool")
}

/// How the suites' `PgStore`s send their statements: `PGIDEM_STATEMENTS` (`prepared`, the
/// default, or `unnamed`: the test command's step through PgBouncer in transaction mode
/// sets it).
pub fn statement_mode() -> pg_idempotency_client::StatementMode {
    match std::env::var("PGIDEM_STATEMENTS") {
        Ok(word) => word
            .parse()
            .expect("PGIDEM_STATEMENTS: prepared or unnamed"),
        Err(_) => pg_idempotency_client::StatementMode::default(),
    }
}

/// A `PgStore` over `source` in the suites' statement mode.
pub fn pg_store<S: pg_idempotency_client::PgSource>(
    source: S,
) -> pg_idempotency_client::PgStore<S> {
    pg_idempotency_client::PgStore::new(source).statement_mode(statement_mode())
}

/// Whether the suites run through a pooler in transaction mode (`PGIDEM_STATEMENTS=unnamed`):
/// the tests' own statements are then unnamed too, and a session's pid names nobody.
pub fn through_pooler() -> bool {
    statement_mode() == pg_idempotency_client::StatementMode::Unnamed
}

/// A name no other test (or earlier run) uses, so suites and stores never meet.
pub fn unique(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{name}-{}-{t}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The test Redis (`REDIS_URL`: the test command sets it when it started scripts/redis.sh's
/// server); None, and the calling test recorded as skipped with its reason, when unset.
#[cfg(feature = "redis")]
pub fn redis_url() -> Option<String> {
    let url = std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty());
    if url.is_none() {
        pg_idempotency_tests::skip(
            pg_idempotency_tests::Skip::Missing,
            "no Redis server (REDIS_URL unset): Debian's redis-server is installed by scripts/setup.sh as root",
        );
    }
    url
}

/// A connection to the test Redis, with its client (for more connections).
#[cfg(feature = "redis")]
pub async fn redis_connection(url: &str) -> (redis::Client, redis::aio::MultiplexedConnection) {
    let client = redis::Client::open(url).expect("REDIS_URL");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot connect to {url}: {e}; start it with scripts/redis.sh start")
        });
    (client, conn)
}

/// A RedisStore on the test Redis, under a prefix of its own; None, and the test skipped,
/// when there is no Redis server.
#[cfg(feature = "redis")]
pub async fn redis_store() -> Option<std::sync::Arc<dyn pg_idempotency_client::IdempotencyStore>> {
    let url = redis_url()?;
    let (_, conn) = redis_connection(&url).await;
    Some(std::sync::Arc::new(pg_idempotency_client::RedisStore::new(
        conn,
        unique("idem") + ":",
    )))
}
