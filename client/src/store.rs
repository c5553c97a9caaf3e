//! The store interface every backend implements with the semantics of the SQL API.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::batch::{self, BatchBegin, BatchBegun, BatchComplete, BatchCompleted, BatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::joined_wait::JoinedWait;
use crate::pg_sql::{ApiSchema, StatementMode};
use crate::types::{Begin, BeginOptions, Completed, Record, ScopeMetrics};

/// Where calls are remembered. Keys are explicit here: a key strategy (such as the hash of
/// the input) is the caller's, so every store sees the same key for the same call.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims the call, or tells it is running, or returns its remembered result.
    async fn begin(&self, scope: &str, key: &str, options: &BeginOptions) -> Result<Begin>;

    /// Records the result of a claimed call; `cache_failure` None follows the policy.
    async fn complete(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        response: Option<&Value>,
        succeeded: bool,
        cache_failure: Option<bool>,
    ) -> Result<Completed>;

    /// Claims many calls of one scope: one answer per item, in the items' order, each what
    /// `begin` would answer that call alone (with no wait), a mismatch or a refused repeat
    /// being that item's `Err`. An argument the store cannot take fails the whole batch
    /// (the outer `Err`) and claims nothing. `PgStore` and `RedisStore` make it one round
    /// trip; this default asks `begin` item by item (a refusal of item n leaves the
    /// claims of the items before it).
    async fn begin_batch(
        &self,
        scope: &str,
        items: &[BatchBegin],
        options: &BatchOptions,
    ) -> Result<Vec<BatchBegun>> {
        crate::batch::check_begin_items(scope, items)?;
        begin_item_by_item(self, scope, items, options).await
    }

    /// Completes many claims of one scope: one answer per item, in the items' order, each
    /// what `complete` would answer, a lost lease being that item's `Err` (the others are
    /// recorded). An argument the store cannot take fails the whole batch and records
    /// nothing. One round trip on `PgStore` and `RedisStore`; this default asks
    /// `complete` item by item.
    async fn complete_batch(
        &self,
        scope: &str,
        items: &[BatchComplete],
    ) -> Result<Vec<BatchCompleted>> {
        crate::batch::check_complete_items(scope, items)?;
        complete_item_by_item(self, scope, items).await
    }

    /// Gives a claim up without a result.
    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()>;

    /// Extends a running claim's lease; returns its new end.
    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime>;

    /// The record of a call until it expires.
    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>>;

    /// Removes expired records; returns how many. `PgStore`: the SQL API's
    /// `idem_purge_expired()`, granted to `idempotency_admin` only (an ordinary
    /// `idempotency_user` role gets `NotPermitted`); the extension's background worker or
    /// pg_cron usually calls it instead.
    async fn purge(&self) -> Result<u64>;

    /// An operator's call: removes the record of a call whatever its state (a bad cached
    /// result, a stuck claim); true when a live record was removed. The next `begin`
    /// claims the call afresh, and a running holder's fence is refused from then on
    /// (lease lost) as after a release. `PgStore`: the SQL API's `idem_forget`, on the
    /// connection's role's own record (granted to `idempotency_user`;
    /// `PgStore::forget_owned_by` names another role's, for `idempotency_admin`).
    ///
    /// Stores written before this call answer an error (kind `Database`) until they
    /// implement it.
    async fn forget(&self, scope: &str, key: &str) -> Result<bool> {
        let _ = (scope, key);
        Err(unsupported("forget"))
    }

    /// An operator's call: per scope, live records by state, lapsed leases, expired records
    /// not yet removed, the oldest running call, and how many `begin` calls answered each
    /// outcome (see `ScopeMetrics`). `PgStore`: the SQL API's `idem_metrics()` (granted to
    /// `idempotency_user`: a role sees its own records' rows; a role with
    /// `idempotency_admin`'s privileges sees every owner's). It reads every record: for
    /// monitoring at a human pace, not for every call.
    async fn metrics(&self) -> Result<Vec<ScopeMetrics>> {
        Err(unsupported("metrics"))
    }

    /// Which records this handle reaches, as far as this process can tell: two handles
    /// with the same identity see the same records, so that a call in this process whose
    /// holder still lives joins that holder rather than taking the call over through the
    /// store (see docs/client.md, "A lost lease"). `PgStore` over a deadpool pool: the pool
    /// (every clone of it, and every `PgStore` made over it) and the API's schema;
    /// `RedisStore::connect`: the server, database, user and prefix. None (the default,
    /// and a store over a borrowed connection): this handle only, that is every holder of
    /// the same `Arc`. A wrapper store forwards its inner store's.
    fn identity(&self) -> Option<String> {
        None
    }

    /// Whether a call whose holder is alive in this process joins that holder instead of
    /// asking the store (docs/client.md, "A retry in the holder's process"). True by
    /// default; a store whose duplicates wait under a cap gates the joined waits too
    /// ([`admit_joined_wait`](Self::admit_joined_wait)) rather than opting out, since a call
    /// that asks the store once its holder's lease lapsed in an outage takes the call over
    /// and runs the tool a second time beside the holder that has the first run's result.
    fn joins_live_holders(&self) -> bool {
        true
    }

    /// Asked by a call that joined its live holder in this process (see
    /// [`joins_live_holders`](Self::joins_live_holders)) before it waits for that holder
    /// (for its tool, as long as the call's `wait`; for its recording, as long as the
    /// lease). `Some`: the call waits, holding what this returned until it has its answer.
    /// `None`: the call does not wait: it is answered at once as a duplicate without `wait`
    /// is (in progress with its retry hint, or the holder's result while the store has not
    /// taken it). A store that caps how many duplicates wait inside its `begin` (the MCP
    /// proxy's gate, per principal and in all) caps the joined waits here with the same
    /// permits, so that joining does not pass its cap by. The default admits every wait at
    /// no cost ([`JoinedWait::free`]). Asked once per joining call, from the call's own task.
    fn admit_joined_wait(&self, scope: &str, key: &str) -> Option<JoinedWait<'_>> {
        let _ = (scope, key);
        Some(JoinedWait::free())
    }

    /// Whether what the store remembers survives a crash and is shared between processes.
    fn durable(&self) -> bool {
        true
    }

    /// A store over the SQL API: the schema it calls the API in, so that work done in a
    /// caller's own transaction (a `PgStore` over it) calls the same functions. None for
    /// stores that are not over the SQL API (and by default).
    fn api_schema(&self) -> Option<&ApiSchema> {
        None
    }

    /// A store over the SQL API: how it sends its statements, so that work done in a
    /// caller's own transaction (a `PgStore` over it) sends them the same way (behind a
    /// pooler in transaction mode, unnamed). None for other stores (and by default).
    fn statement_mode(&self) -> Option<StatementMode> {
        None
    }
}

fn unsupported(call: &str) -> Error {
    Error::new(
        ErrorKind::Database,
        format!("this store does not implement {call}"),
    )
}

/// The batch calls' fallback, for a store without batches of its own (the trait's
/// defaults, `MemoryStore`). It lives here, not in batch.rs, so that batch.rs (the batch's
/// types and checks) needs nothing of the store.
///
/// Asks `begin` for each item in turn: a refusal that is an item's answer is kept as that
/// item's `Err`, any other error fails the batch (the items before it keep their claims).
pub(crate) async fn begin_item_by_item<S: IdempotencyStore + ?Sized>(
    store: &S,
    scope: &str,
    items: &[BatchBegin],
    options: &BatchOptions,
) -> Result<Vec<BatchBegun>> {
    let mut answers = Vec::with_capacity(items.len());
    for item in items {
        answers.push(
            match store.begin(scope, &item.key, &options.for_item(item)).await {
                Err(e) if batch::an_items_begin_answer(e.kind) => Err(e),
                Err(e) => return Err(e),
                ok => ok,
            },
        );
    }
    Ok(answers)
}

/// Asks `complete` for each item in turn, as `begin_item_by_item` asks `begin`.
pub(crate) async fn complete_item_by_item<S: IdempotencyStore + ?Sized>(
    store: &S,
    scope: &str,
    items: &[BatchComplete],
) -> Result<Vec<BatchCompleted>> {
    let mut answers = Vec::with_capacity(items.len());
    for i in items {
        let done = store
            .complete(
                scope,
                &i.key,
                i.fence,
                i.response.as_ref(),
                i.succeeded,
                i.cache_failure,
            )
            .await;
        answers.push(match done {
            Err(e) if batch::an_items_complete_answer(e.kind) => Err(e),
            Err(e) => return Err(e),
            ok => ok,
        });
    }
    Ok(answers)
}
