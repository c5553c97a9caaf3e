//! The stores the web scenarios run over, each fresh for one test; None (the test recorded
//! as skipped, with its reason) when the store cannot be had here.

use std::sync::Arc;

use pg_idempotency_client::*;

use crate::common::*;

pub type Store = Arc<dyn IdempotencyStore>;

/// `PgStore` over whichever backend (extension or portable SQL) `PGIDEM_DSN`'s database has
/// installed. Action names are unique per test, so records of earlier runs never answer.
pub async fn postgres() -> Option<Store> {
    let store = PgStore::new(pool());
    store
        .check_installed()
        .await
        .expect("pg_idempotency installed in PGIDEM_DSN's database");
    Some(Arc::new(store))
}

pub async fn memory() -> Option<Store> {
    Some(Arc::new(MemoryStore::new()))
}

#[cfg(feature = "redis")]
pub async fn redis() -> Option<Store> {
    redis_store().await
}

#[cfg(not(feature = "redis"))]
pub async fn redis() -> Option<Store> {
    pg_idempotency_tests::skip(
        pg_idempotency_tests::Skip::NotApplicable,
        "built without the client's redis feature (--features pg_idempotency_client/redis)",
    );
    None
}

/// An action name (the records' scope) no other test or earlier run uses.
pub fn unique_action(what: &str) -> String {
    unique(what)
}

/// The call's key under `KeyStrategy::HashInput`: what the provider must see.
pub fn hash_key(input: &serde_json::Value) -> String {
    pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(input).unwrap())
}

/// Methods that change something upstream (and carry `Idempotency-Key`).
pub fn unsafe_methods() -> [Method; 4] {
    [Method::POST, Method::PUT, Method::PATCH, Method::DELETE]
}

/// Methods that only read (and carry none).
pub fn safe_methods() -> [Method; 4] {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE]
}
