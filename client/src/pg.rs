//! `PgStore`: the store over the SQL API, through a pooled connection, a plain client, or
//! the caller's own transaction (claim, write and complete in one transaction are
//! exactly-once).

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Statement};

use crate::batch::{self, BatchBegin, BatchBegun, BatchComplete, BatchCompleted, BatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::{response as storable_response, scope_and_key_without_nul};
use crate::pg_sql::{params, ApiSchema, StatementMode, Statements};
use crate::store::IdempotencyStore;
use pg_idempotency_protocol::refusal::{self, Api};
use pg_idempotency_protocol::{BatchCompletion, BatchOutcome, Completion, Outcome, State};

use crate::types::{
    state_named, Begin, BeginOptions, Claim, Completed, InProgress, OutcomeCounts, Record, Replay,
    ScopeMetrics,
};

/// Anything that lends a connection: a deadpool pool, a tokio-postgres client (shared in an
/// `Arc` or borrowed), or a transaction.
pub trait PgSource: Send + Sync {
    type Client: GenericClient + Send + Sync;
    type Guard<'a>: Deref<Target = Self::Client> + Send + Sync
    where
        Self: 'a;
    fn client(&self) -> impl Future<Output = Result<Self::Guard<'_>>> + Send;

    /// Called once the call's last statement on the lent connection has been answered
    /// (result or server error): the connection is in step with the server again. A guard
    /// dropped before that (the caller's timeout dropped the call mid-statement) lends a
    /// connection whose answer is still owed; a pool must not lend it again.
    fn settled(_guard: &mut Self::Guard<'_>) {}

    /// Which connections this is, for [`IdempotencyStore::identity`]: a pool's (shared by
    /// its clones), a shared client's; None for a borrowed client or a transaction.
    fn identity(&self) -> Option<String> {
        None
    }

    /// Prepares `sql` on a lent connection: from the connection's statement cache where it
    /// has one (pooled connections), so that a call is one round trip.
    fn prepare<'g>(
        guard: &'g Self::Guard<'_>,
        sql: &'g str,
    ) -> impl Future<Output = Result<Statement>> + Send + 'g
    where
        Self: Sized,
    {
        async move { Ok(guard.prepare(sql).await?) }
    }
}

impl PgSource for Arc<tokio_postgres::Client> {
    type Client = tokio_postgres::Client;
    type Guard<'a> = &'a tokio_postgres::Client;
    fn identity(&self) -> Option<String> {
        Some(format!("client {:p}", Arc::as_ptr(self)))
    }
    async fn client(&self) -> Result<Self::Guard<'_>> {
        Ok(self.as_ref())
    }
}

impl PgSource for &tokio_postgres::Client {
    type Client = tokio_postgres::Client;
    type Guard<'a>
        = &'a tokio_postgres::Client
    where
        Self: 'a;
    async fn client(&self) -> Result<Self::Guard<'_>> {
        Ok(self)
    }
}

impl<'t> PgSource for &tokio_postgres::Transaction<'t> {
    type Client = tokio_postgres::Transaction<'t>;
    type Guard<'a>
        = &'a tokio_postgres::Transaction<'t>
    where
        Self: 'a;
    async fn client(&self) -> Result<Self::Guard<'_>> {
        Ok(self)
    }
}

/// A connection taken from a deadpool pool for one call. Dropped before the call settled
/// (a timeout dropped it mid-statement, on a connection that may be half-open), it is
/// taken out of the pool and closed instead of going back: the pool's quick check
/// (`is_closed`) cannot see a connection still waiting for an answer, and every later call
/// lent it would wait behind that answer.
#[cfg(feature = "deadpool")]
pub struct Pooled {
    object: Option<deadpool_postgres::Object>,
    settled: bool,
}

#[cfg(feature = "deadpool")]
impl Deref for Pooled {
    type Target = tokio_postgres::Client;
    fn deref(&self) -> &tokio_postgres::Client {
        self.object
            .as_ref()
            .expect("a pooled connection until dropped")
    }
}

#[cfg(feature = "deadpool")]
impl Drop for Pooled {
    fn drop(&mut self) {
        if let (false, Some(object)) = (self.settled, self.object.take()) {
            drop(deadpool_postgres::Object::take(object));
        }
    }
}

#[cfg(feature = "deadpool")]
impl PgSource for deadpool_postgres::Pool {
    type Client = tokio_postgres::Client;
    type Guard<'a> = Pooled;
    /// The pool's manager lives in the pool's shared state: one address for every clone.
    /// Its connections share one configured role, the records' owner.
    fn identity(&self) -> Option<String> {
        Some(format!("deadpool {:p}", self.manager()))
    }
    async fn client(&self) -> Result<Pooled> {
        Ok(Pooled {
            object: Some(self.get().await?),
            settled: false,
        })
    }

    fn settled(guard: &mut Pooled) {
        guard.settled = true;
    }

    // Written out (not `async fn`) to match the trait's `+ 'g` bound.
    #[allow(clippy::manual_async_fn)]
    fn prepare<'g>(
        guard: &'g Self::Guard<'_>,
        sql: &'g str,
    ) -> impl Future<Output = Result<Statement>> + Send + 'g
    where
        Self: Sized,
    {
        async move {
            let object = guard
                .object
                .as_ref()
                .expect("a pooled connection until dropped");
            Ok(object.prepare_cached(sql).await?)
        }
    }
}

/// The store over pg_idempotency's SQL API (the extension or the portable SQL), in the
/// schema the API is installed in (`public` unless `schema` names another). Every statement
/// it sends names that schema (`"public".idem_begin(...)`), so that no function of the same
/// name in a schema earlier on the session's `search_path` can take its calls.
pub struct PgStore<S> {
    source: S,
    sql: Arc<Statements>,
    mode: StatementMode,
}

/// The SQLSTATEs of a named statement that is not in the session the pooler lent:
/// 26000 (`prepared statement "s1" does not exist`: prepared on another server
/// connection) and 42P05 (`... already exists`: another client's of the same name).
const POOLER_SQLSTATES: [&str; 2] = ["26000", "42P05"];

/// A named statement's error that says a pooler lends sessions per transaction gets a hint
/// that says what to do.
fn pooler_hint(e: Error) -> Error {
    use std::error::Error as _;
    let code = e
        .source()
        .and_then(|s| s.downcast_ref::<tokio_postgres::Error>())
        .and_then(|pg| pg.as_db_error())
        .map(|db| db.code().code().to_string());
    match code {
        Some(code) if POOLER_SQLSTATES.contains(&code.as_str()) && e.hint().is_none() => e
            .with_hint(
                "The server (or a pooler in front of it) does not keep this connection's \
                 prepared statements: behind a pooler in transaction mode (PgBouncer, \
                 Supavisor, Neon's pooler) use unnamed statements: \
                 PgStore::new(pool).statement_mode(StatementMode::Unnamed), \
                 statement_mode=unnamed in the HTTP layer's and the MCP proxy's store settings.",
            ),
        _ => e,
    }
}

/// Runs one of the store's statements on a lent connection, the way `mode` says: a named
/// statement from the connection's cache, or an unnamed one sent with `types`.
async fn run<S: PgSource>(
    mode: StatementMode,
    guard: &S::Guard<'_>,
    sql: &str,
    types: &[Type],
    values: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let client: &S::Client = guard;
    let rows = match mode {
        StatementMode::Prepared => {
            let stmt = S::prepare(guard, sql).await.map_err(pooler_hint)?;
            client.query(&stmt, values).await
        }
        StatementMode::Unnamed => {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                values.iter().copied().zip(types.iter().cloned()).collect();
            client.query_typed(sql, &typed).await
        }
    };
    rows.map_err(|e| pooler_hint(e.into()))
}

/// The one row `function` answers, or `ErrorKind::Serialization`.
fn one(rows: Vec<Row>, function: &str) -> Result<Row> {
    let n = rows.len();
    let mut rows = rows.into_iter();
    match (rows.next(), n) {
        (Some(row), 1) => Ok(row),
        _ => Err(Error::new(
            ErrorKind::Serialization,
            format!("{function} answered {n} rows, not one"),
        )),
    }
}

/// The row `function` answers, if any, or `ErrorKind::Serialization` for more than one.
fn at_most_one(rows: Vec<Row>, function: &str) -> Result<Option<Row>> {
    if rows.is_empty() {
        Ok(None)
    } else {
        one(rows, function).map(Some)
    }
}

fn interval(d: Duration) -> String {
    format!("{} microseconds", d.as_micros())
}

/// A batch item's refusal, which the SQL API answers as its outcome: the error a single
/// call raises, its detail naming the item (the batch's row has no fingerprints).
fn item_refused(item: i32, outcome: BatchOutcome) -> Error {
    let (kind, message, detail, hint) = match outcome {
        BatchOutcome::Mismatch => {
            let r = refusal::mismatch(&[], &[]);
            (
                ErrorKind::Mismatch,
                r.message,
                "the key was first used with a different request",
                r.hint,
            )
        }
        _ => {
            let r = refusal::repeat_refused(State::Succeeded, 1, Api::Client);
            (
                ErrorKind::RepeatRefused,
                r.message,
                "the call completed and on_cache_hit is 'fail_fast'",
                r.hint,
            )
        }
    };
    Error::new(kind, message)
        .with_detail(format!("Item {item} of the batch: {detail}."))
        .with_hint(hint)
}

fn item_lease_lost(item: i32) -> Error {
    let r = refusal::lease_lost(
        pg_idempotency_protocol::decide::Lost::OtherFence,
        Api::Client,
    );
    Error::new(ErrorKind::LeaseLost, r.message)
        .with_detail(format!(
            "Item {item} of the batch: the fence does not hold the record (taken over, completed, released, forgotten or expired)."
        ))
        .with_hint(r.hint)
}

/// The answers of a batch in item order, refusing a count other than the items'.
fn in_item_order<T>(n: usize, mut rows: Vec<(i32, T)>, function: &str) -> Result<Vec<T>> {
    rows.sort_by_key(|(item, _)| *item);
    let in_order = rows
        .iter()
        .enumerate()
        .all(|(i, (item, _))| *item == i as i32 + 1);
    if rows.len() != n || !in_order {
        return Err(Error::new(
            ErrorKind::Serialization,
            format!(
                "{function} answered {} rows for {n} items, or not one per item",
                rows.len()
            ),
        ));
    }
    Ok(rows.into_iter().map(|(_, t)| t).collect())
}

impl<S: PgSource> PgStore<S> {
    /// Over `source`, calling the API in `public`.
    pub fn new(source: S) -> PgStore<S> {
        PgStore {
            source,
            sql: Statements::public(),
            mode: StatementMode::default(),
        }
    }

    /// Sends the store's statements the way `mode` says: `StatementMode::Prepared` (the
    /// default) or `StatementMode::Unnamed`, which a pooler in transaction mode needs:
    /// `PgStore::new(pool).statement_mode(StatementMode::Unnamed)`.
    pub fn statement_mode(mut self, mode: StatementMode) -> PgStore<S> {
        self.mode = mode;
        self
    }

    /// The way the store sends its statements.
    pub fn mode(&self) -> StatementMode {
        self.mode
    }

    /// Runs one statement on a connection of its own from the source, settling it.
    async fn call(
        &self,
        sql: &str,
        types: &[Type],
        values: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let mut c = self.source.client().await?;
        let answer = run::<S>(self.mode, &c, sql, types, values).await;
        S::settled(&mut c);
        answer
    }

    /// A statement without parameters run once in a while (purge, metrics): prepared, it is
    /// not kept on the connection (tokio-postgres prepares it, runs it and closes it).
    async fn occasional(&self, sql: &str) -> Result<Vec<Row>> {
        match self.mode {
            StatementMode::Prepared => {
                let mut c = self.source.client().await?;
                let answer = c.query(sql, &[]).await;
                S::settled(&mut c);
                answer.map_err(|e| pooler_hint(e.into()))
            }
            StatementMode::Unnamed => self.call(sql, params::NONE, &[]).await,
        }
    }

    /// Calls the API in the schema `name` (as the catalogue spells it; `ApiSchema::new`
    /// says what is refused, with `ErrorKind::InvalidArgument`):
    /// `PgStore::new(pool).schema("app")?`.
    pub fn schema(self, name: &str) -> Result<PgStore<S>> {
        Ok(self.in_schema(&ApiSchema::new(name)?))
    }

    /// Calls the API in `schema`, already checked.
    pub fn in_schema(mut self, schema: &ApiSchema) -> PgStore<S> {
        self.sql = Statements::for_schema(schema);
        self
    }

    /// Fails fast, with `ErrorKind::NotInstalled`, when the SQL API is missing from the
    /// store's schema.
    pub async fn check_installed(&self) -> Result<()> {
        // The signature this client calls (0.3.0's and later), as protocol declares it, in
        // the store's schema.
        let rows = self
            .call(
                self.sql.installed,
                params::INSTALLED,
                &[&self.sql.begin_signature],
            )
            .await?;
        let found: bool = one(rows, "to_regprocedure")?.get(0);
        if found {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::NotInstalled,
                format!(
                    "pg_idempotency 0.8.0 or later is not installed in the schema {} of this database",
                    self.sql.schema
                ),
            )
            .with_hint(
                "CREATE EXTENSION pg_idempotency (or ALTER EXTENSION pg_idempotency UPDATE), or install or upgrade the portable SQL; or name the schema it is installed in (PgStore::schema).",
            ))
        }
    }
}

impl<S: PgSource> PgStore<S> {
    /// An admin's `forget`: removes `owner`'s record of the call (a role name), true when a
    /// live one was removed. Naming a role other than the connection's own needs the
    /// privileges of `idempotency_admin` (else `ErrorKind::NotPermitted`, whether or not
    /// the record exists).
    pub async fn forget_owned_by(&self, scope: &str, key: &str, owner: &str) -> Result<bool> {
        self.forgotten(scope, key, Some(owner)).await
    }

    async fn forgotten(&self, scope: &str, key: &str, owner: Option<&str>) -> Result<bool> {
        scope_and_key_without_nul(scope, key)?;
        let rows = self
            .call(&self.sql.forget, params::FORGET, &[&scope, &key, &owner])
            .await?;
        Ok(one(rows, "idem_forget")?.get(0))
    }
}

/// `idem_metrics()`'s row; the counters come together or not at all.
fn metrics_row(r: &Row) -> ScopeMetrics {
    let count = |i: usize| r.get::<_, Option<i64>>(i).map(|n| n.max(0) as u64);
    let outcomes = match (count(8), count(9), count(10), count(11)) {
        (Some(claimed), Some(replay), Some(in_progress), Some(mismatch)) => Some(OutcomeCounts {
            claimed,
            replay,
            in_progress,
            mismatch,
        }),
        _ => None,
    };
    ScopeMetrics {
        owner: r.get(0),
        scope: r.get(1),
        in_progress: count(2).unwrap_or(0),
        succeeded: count(3).unwrap_or(0),
        failed: count(4).unwrap_or(0),
        lapsed: count(5).unwrap_or(0),
        expired: count(6).unwrap_or(0),
        oldest_in_progress: r
            .get::<_, Option<f64>>(7)
            .map(|s| Duration::from_secs_f64(s.max(0.0))),
        outcomes,
        note: r.get(12),
    }
}

fn begin_row(row: &Row) -> Result<Begin> {
    let outcome: String = row.get(0);
    Ok(match Outcome::parse(&outcome) {
        Some(Outcome::Claimed) => Begin::Claimed(Claim {
            fence: row.get(1),
            attempt: row.get(2),
            recovered: row.get(3),
            upstream_key: row.get(4),
            lease_until: row.get(7),
            expires_at: row.get(8),
        }),
        Some(Outcome::Replay) => Begin::Replay(Replay {
            succeeded: row.get::<_, Option<bool>>(5).unwrap_or(false),
            response: row.get(6),
            attempt: row.get(2),
            upstream_key: row.get(4),
            expires_at: row.get(8),
        }),
        Some(Outcome::InProgress) => Begin::InProgress(InProgress {
            attempt: row.get(2),
            upstream_key: row.get(4),
            retry_after: Duration::from_secs_f64(
                row.get::<_, Option<f64>>(9).unwrap_or(0.0).max(0.0),
            ),
        }),
        None => {
            return Err(Error::new(
                ErrorKind::Serialization,
                format!(
                    "idem_begin answered the outcome {outcome:?}, not one of {}",
                    Outcome::listed()
                ),
            ))
        }
    })
}

#[async_trait]
impl<S: PgSource> IdempotencyStore for PgStore<S> {
    async fn begin(&self, scope: &str, key: &str, o: &BeginOptions) -> Result<Begin> {
        // The server would refuse these while reading the parameters, with errors that do
        // not say what was wrong (22021, 22P05): refused here with the kinds the other
        // stores give. The other limits are the server's (they are settings there).
        scope_and_key_without_nul(scope, key)?;
        if let Some(request) = &o.request {
            pg_idempotency_canon::check_value(request)?;
        }
        let rows = self
            .call(
                &self.sql.begin,
                params::BEGIN,
                &[
                    &scope,
                    &key,
                    &o.request,
                    &o.ttl.map(interval),
                    &o.lease.map(interval),
                    &o.on_cache_hit.map(|w| w.as_sql()),
                    &o.on_mismatch.map(|w| w.as_sql()),
                    &interval(o.wait),
                    &o.claim_token.map(|t| t.to_string()),
                    &o.unresolved_ttl.map(interval),
                ],
            )
            .await?;
        begin_row(&one(rows, "idem_begin")?)
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
        scope_and_key_without_nul(scope, key)?;
        storable_response(response)?;
        let rows = self
            .call(
                &self.sql.complete,
                params::COMPLETE,
                &[&scope, &key, &fence, &response, &succeeded, &cache_failure],
            )
            .await?;
        let word: String = one(rows, "idem_complete")?.get(0);
        match Completion::parse(&word) {
            Some(done) => Ok(done.into()),
            None => Err(Error::new(
                ErrorKind::Serialization,
                format!(
                    "idem_complete answered the state {word:?}, not one of {}",
                    Completion::listed()
                ),
            )),
        }
    }

    async fn begin_batch(
        &self,
        scope: &str,
        items: &[BatchBegin],
        o: &BatchOptions,
    ) -> Result<Vec<BatchBegun>> {
        batch::check_begin_items(scope, items)?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        let requests: Option<Vec<Option<&Value>>> = items
            .iter()
            .any(|i| i.request.is_some())
            .then(|| items.iter().map(|i| i.request.as_ref()).collect());
        let tokens: Option<Vec<Option<String>>> =
            items.iter().any(|i| i.claim_token.is_some()).then(|| {
                items
                    .iter()
                    .map(|i| i.claim_token.map(|t| t.to_string()))
                    .collect()
            });
        let answer = self
            .call(
                &self.sql.begin_batch,
                params::BEGIN_BATCH,
                &[
                    &scope,
                    &keys,
                    &requests,
                    &o.ttl.map(interval),
                    &o.lease.map(interval),
                    &o.on_cache_hit.map(|w| w.as_sql()),
                    &o.on_mismatch.map(|w| w.as_sql()),
                    &tokens,
                ],
            )
            .await;
        let rows = answer?
            .iter()
            .map(|row| {
                let item: i32 = row.get(10);
                let outcome: String = row.get(0);
                let answer = match BatchOutcome::parse(&outcome) {
                    Some(o @ (BatchOutcome::Mismatch | BatchOutcome::Refused)) => {
                        Err(item_refused(item, o))
                    }
                    _ => Ok(begin_row(row)?),
                };
                Ok((item, answer))
            })
            .collect::<Result<Vec<_>>>()?;
        in_item_order(items.len(), rows, "idem_begin_batch")
    }

    async fn complete_batch(
        &self,
        scope: &str,
        items: &[BatchComplete],
    ) -> Result<Vec<BatchCompleted>> {
        batch::check_complete_items(scope, items)?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        let fences: Vec<i64> = items.iter().map(|i| i.fence).collect();
        let responses: Vec<Option<&Value>> = items.iter().map(|i| i.response.as_ref()).collect();
        let succeeded: Vec<bool> = items.iter().map(|i| i.succeeded).collect();
        let cache: Vec<Option<bool>> = items.iter().map(|i| i.cache_failure).collect();
        let answer = self
            .call(
                &self.sql.complete_batch,
                params::COMPLETE_BATCH,
                &[&scope, &keys, &fences, &responses, &succeeded, &cache],
            )
            .await;
        let rows = answer?
            .iter()
            .map(|row| {
                let item: i32 = row.get(0);
                let outcome: String = row.get(1);
                let answer = match BatchCompletion::parse(&outcome) {
                    Some(BatchCompletion::LeaseLost) => Err(item_lease_lost(item)),
                    Some(BatchCompletion::Completed) => {
                        let word: Option<String> = row.get(2);
                        match word.as_deref().and_then(Completion::parse) {
                            Some(done) => Ok(done.into()),
                            None => {
                                return Err(Error::new(
                                    ErrorKind::Serialization,
                                    format!("idem_complete_batch answered the state {word:?}"),
                                ))
                            }
                        }
                    }
                    None => {
                        return Err(Error::new(
                            ErrorKind::Serialization,
                            format!(
                            "idem_complete_batch answered the outcome {outcome:?}, not one of {}",
                            BatchCompletion::listed()
                        ),
                        ))
                    }
                };
                Ok((item, answer))
            })
            .collect::<Result<Vec<_>>>()?;
        in_item_order(items.len(), rows, "idem_complete_batch")
    }

    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        scope_and_key_without_nul(scope, key)?;
        self.call(&self.sql.release, params::RELEASE, &[&scope, &key, &fence])
            .await?;
        Ok(())
    }

    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime> {
        scope_and_key_without_nul(scope, key)?;
        let rows = self
            .call(
                &self.sql.extend,
                params::EXTEND,
                &[&scope, &key, &fence, &lease.map(interval)],
            )
            .await?;
        Ok(one(rows, "idem_extend")?.get(0))
    }

    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        scope_and_key_without_nul(scope, key)?;
        let rows = self
            .call(&self.sql.lookup, params::LOOKUP, &[&scope, &key])
            .await?;
        at_most_one(rows, "idem_lookup")?
            .map(|r| {
                Ok(Record {
                    state: state_named(r.get(0))?,
                    fence: r.get(1),
                    attempt: r.get(2),
                    fingerprint: r
                        .get::<_, Option<Vec<u8>>>(3)
                        .and_then(|v| v.try_into().ok()),
                    upstream_key: r.get(4),
                    response: r.get(5),
                    created_at: r.get(6),
                    completed_at: r.get(7),
                    lease_until: r.get(8),
                    expires_at: r.get(9),
                })
            })
            .transpose()
    }

    async fn purge(&self) -> Result<u64> {
        let rows = self.occasional(&self.sql.purge).await?;
        let n: i64 = one(rows, "idem_purge_expired")?.get(0);
        Ok(n.max(0) as u64)
    }

    async fn forget(&self, scope: &str, key: &str) -> Result<bool> {
        self.forgotten(scope, key, None).await
    }

    async fn metrics(&self) -> Result<Vec<ScopeMetrics>> {
        let rows = self.occasional(&self.sql.metrics).await?;
        Ok(rows.iter().map(metrics_row).collect())
    }

    fn api_schema(&self) -> Option<&ApiSchema> {
        Some(&self.sql.schema)
    }

    fn identity(&self) -> Option<String> {
        let source = self.source.identity()?;
        Some(format!("pg {source} schema {}", self.sql.schema.quoted()))
    }

    fn statement_mode(&self) -> Option<StatementMode> {
        Some(self.mode)
    }
}
