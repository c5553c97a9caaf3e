//! The store the proxy's dispatcher uses: two `PgStore`s over two pools of the same
//! database, and the waiters' gate.
//!
//! - The pool (`[database] pool_size`) takes `begin` (through the gate when it may wait),
//!   lookups and an operator's calls. A duplicate that joins the proxy's own live holder
//!   waits in memory, through the same gate (`admit_joined_wait`).
//! - A small pool of its own (`[limits] heartbeat_connections`) takes what a running call's
//!   holder asks: its lease extensions, its result, its release. A crowd of waiting
//!   duplicates holds connections of the first pool only, so it never delays a heartbeat
//!   until the lease lapses and a duplicate takes the running call over (a second effect).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pg_idempotency_client::{
    ApiSchema, BatchBegin, BatchBegun, BatchComplete, BatchCompleted, BatchOptions, Begin,
    BeginOptions, Completed, Error, ErrorKind, IdempotencyStore, JoinedWait, Record, Result,
    ScopeMetrics, StatementMode,
};
use serde_json::Value;

use crate::waiters::Gate;

pub struct SplitStore {
    /// `begin`, lookups, an operator's calls.
    pub calls: Arc<dyn IdempotencyStore>,
    /// A running call's heartbeat, result and release.
    pub holders: Arc<dyn IdempotencyStore>,
    pub gate: Gate,
}

/// A pool that lent no connection in time: what the caller is told to do.
fn pool_hint(e: Error) -> Error {
    if e.kind != ErrorKind::Pool {
        return e;
    }
    e.with_detail("Every connection of the proxy's pool to the records' database stayed busy for limits.pool_wait_timeout, or none could be opened.")
        .with_hint("The call was not sent: retry it in a moment. If this persists, raise [database] pool_size (and the database's max_connections) or look for what holds the connections.")
}

#[async_trait]
impl IdempotencyStore for SplitStore {
    // Defaults kept: joins_live_holders (a duplicate joins the proxy's live holder, through
    // the gate: admit_joined_wait below).
    async fn begin(&self, scope: &str, key: &str, options: &BeginOptions) -> Result<Begin> {
        if options.wait.is_zero() {
            return self
                .calls
                .begin(scope, key, options)
                .await
                .map_err(pool_hint);
        }
        match self.gate.admit() {
            Ok(_admitted) => self.calls.begin(scope, key, options).await,
            Err(_capped) => {
                // Answered at once, as a duplicate without `wait` is; a call that is no
                // duplicate claims as usual.
                let no_wait = BeginOptions {
                    wait: Duration::ZERO,
                    ..options.clone()
                };
                self.calls.begin(scope, key, &no_wait).await
            }
        }
        .map_err(pool_hint)
    }

    async fn complete(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        response: Option<&Value>,
        succeeded: bool,
        cache_failure: Option<bool>,
    ) -> Result<Completed> {
        self.holders
            .complete(scope, key, fence, response, succeeded, cache_failure)
            .await
            .map_err(pool_hint)
    }

    async fn begin_batch(
        &self,
        scope: &str,
        items: &[BatchBegin],
        options: &BatchOptions,
    ) -> Result<Vec<BatchBegun>> {
        // A batch does not wait (each item answers as `begin` with no wait would).
        self.calls
            .begin_batch(scope, items, options)
            .await
            .map_err(pool_hint)
    }

    async fn complete_batch(
        &self,
        scope: &str,
        items: &[BatchComplete],
    ) -> Result<Vec<BatchCompleted>> {
        self.holders
            .complete_batch(scope, items)
            .await
            .map_err(pool_hint)
    }

    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        self.holders
            .release(scope, key, fence)
            .await
            .map_err(pool_hint)
    }

    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime> {
        self.holders
            .extend(scope, key, fence, lease)
            .await
            .map_err(pool_hint)
    }

    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        self.calls.lookup(scope, key).await.map_err(pool_hint)
    }

    async fn purge(&self) -> Result<u64> {
        self.calls.purge().await.map_err(pool_hint)
    }

    async fn forget(&self, scope: &str, key: &str) -> Result<bool> {
        self.calls.forget(scope, key).await.map_err(pool_hint)
    }

    async fn metrics(&self) -> Result<Vec<ScopeMetrics>> {
        self.calls.metrics().await.map_err(pool_hint)
    }

    fn durable(&self) -> bool {
        self.calls.durable()
    }

    /// Both pools reach the same records: the calls' pool's identity stands for both.
    fn identity(&self) -> Option<String> {
        self.calls.identity()
    }

    /// A duplicate that joins the proxy's own live holder waits in memory, not in
    /// `idem_begin`: it passes the same gate as a waiting `begin` (per principal and in
    /// all), and one not admitted is answered at once as a duplicate without `wait` is.
    fn admit_joined_wait(&self, _scope: &str, _key: &str) -> Option<JoinedWait<'_>> {
        self.gate.admit().ok().map(JoinedWait::holding)
    }

    /// Both pools call the API in one schema (store.rs): the calls' pool's answers for both.
    fn api_schema(&self) -> Option<&ApiSchema> {
        self.calls.api_schema()
    }

    fn statement_mode(&self) -> Option<StatementMode> {
        self.calls.statement_mode()
    }
}
