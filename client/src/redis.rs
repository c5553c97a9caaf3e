//! `RedisStore` (cargo feature `redis`): the same semantics on a Redis the caller owns.
//! Records are JSON under `<prefix><scope length>:<scope>:<key>` with Redis expiry at their
//! `expires_at`; a new key is claimed with `SET NX PXAT`, and every decision that reads and
//! writes a record (claim again, complete, release, extend) is one server-side script, so
//! it is atomic. Times come from the Redis server's clock. Expired records are removed by
//! Redis itself, so `purge` has nothing to do.
//!
//! The record's state machine is decided by pg_idempotency_protocol::decide for the extension and
//! `MemoryStore`; this store states it again in its scripts (client/src/redis_lua/), which
//! must decide inside Redis to be atomic, as the PL/pgSQL variant (sql/pg_idempotency.sql)
//! does inside PostgreSQL. client/tests/parity.rs runs one table of scenarios over every
//! store and holds them equal. Its refusals are worded by pg_idempotency_protocol::refusal, as every
//! store's are. Every limit and default the scripts use comes in as an argument from
//! client/src/limits.rs and protocol/src/estimate.rs: the scripts hold none of their own.
//!
//! Beside the records, each scope has a hash `<prefix>scope:<scope length>:<scope>` with
//! its claim-to-completion estimate (`retry_after`'s, updated by the completing script)
//! and its outcome counters (`metrics`'), counted by the begin script. Neither expires.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::{Script, ScriptInvocation};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::batch::{BatchBegin, BatchBegun, BatchComplete, BatchCompleted, BatchOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::limits::{
    begin_durations, duration, lease_for, response as storable_response, response_bytes,
    scope_and_key, unresolved_ttl, DEFAULT_LEASE, DEFAULT_UNRESOLVED_TTL,
};
use crate::marks::Mark;
use crate::store::IdempotencyStore;
use crate::types::*;
use pg_idempotency_protocol::decide::Lost;
use pg_idempotency_protocol::estimate::{FLOOR_MS, UNKNOWN_MS, WEIGHT};
use pg_idempotency_protocol::refusal::{self, Api};

const BEGIN: &str = include_str!("redis_lua/begin.lua");
const HELD: &str = include_str!("redis_lua/held.lua");
const LOOKUP: &str = include_str!("redis_lua/lookup.lua");
const FORGET: &str = include_str!("redis_lua/forget.lua");

/// After the prefix, the name of a scope's hash of figures starts with this word.
const FIGURES: &str = "scope:";

pub struct RedisStore {
    conn: std::sync::RwLock<MultiplexedConnection>,
    /// Where a connection that broke is made again (`RedisStore::connect`); None for a
    /// store on the caller's connection (`RedisStore::new`), which stays broken.
    reconnect: Option<(redis::Client, redis::AsyncConnectionConfig)>,
    /// The last call found the connection broken: the next one connects again first.
    broken: std::sync::atomic::AtomicBool,
    reconnecting: tokio::sync::Mutex<()>,
    prefix: String,
    begin: Script,
    held: Script,
    lookup: Script,
    forget: Script,
}

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn redis_err(e: redis::RedisError) -> Error {
    // A dropped connection or a timeout may come after the script ran.
    let unknown = e.is_io_error() || e.is_connection_dropped() || e.is_timeout();
    Error::new(ErrorKind::Database, format!("redis: {e}")).with_outcome_unknown(unknown)
}

#[derive(Deserialize)]
struct Answer {
    o: String,
    fence: Option<i64>,
    attempt: Option<i32>,
    recovered: Option<bool>,
    up: Option<String>,
    lease: Option<i64>,
    exp: Option<i64>,
    retry: Option<i64>,
    /// An in_progress answer that ends a wait: its holder has stopped beating.
    fin: Option<bool>,
    ok: Option<bool>,
    resp: Option<String>,
    stored: Option<String>,
    state: Option<String>,
}

#[derive(Deserialize)]
struct Stored {
    state: String,
    fence: i64,
    attempt: i32,
    fp: String,
    up: String,
    resp: Option<String>,
    created: i64,
    completed: Option<i64>,
    lease: Option<i64>,
    exp: i64,
    /// Until when a record whose outcome is unknown stays past `exp` (ms), if it does.
    unr: Option<i64>,
}

impl Stored {
    /// Live until its expiry, or while its outcome is unknown until its unresolved bound.
    fn is_live(&self, now: i64) -> bool {
        self.exp > now || self.unr.is_some_and(|u| u > now)
    }
}

fn uuid(s: Option<&str>) -> Uuid {
    s.and_then(|s| Uuid::parse_str(s).ok()).unwrap_or_default()
}

fn json(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

/// A script's `lost:<why>` answer; `completed` is the holder's op's own refusal.
fn lost(code: &str, completed: Lost) -> Error {
    let why = match code {
        "lost:later" => Lost::LaterFence,
        "lost:fence" => Lost::OtherFence,
        "lost:completed" => completed,
        _ => Lost::Absent,
    };
    refusal::lease_lost(why, Api::Client).into()
}

fn unexpected(answer: &str) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("redis answer: unexpected {answer:?}"),
    )
}

/// The begin script's answer: the call's answer (a refusal as its `Err`), or, for
/// in_progress, `Err(retry_after)` (the caller answers it, or asks again while it waits).
fn begun(
    raw: &str,
    given: &Option<[u8; 32]>,
    last: bool,
) -> Result<std::result::Result<Result<Begin>, Duration>> {
    let a: Answer = serde_json::from_str(raw)
        .map_err(|e| Error::new(ErrorKind::Serialization, format!("redis answer: {e}")))?;
    Ok(Ok(match a.o.as_str() {
        "claimed" => Ok(Begin::Claimed(Claim {
            fence: a.fence.unwrap_or_default(),
            attempt: a.attempt.unwrap_or(1),
            recovered: a.recovered.unwrap_or(false),
            upstream_key: uuid(a.up.as_deref()),
            lease_until: at(a.lease.unwrap_or_default()),
            expires_at: at(a.exp.unwrap_or_default()),
        })),
        "replay" => Ok(Begin::Replay(Replay {
            succeeded: a.ok.unwrap_or(false),
            response: json(a.resp.as_deref()),
            attempt: a.attempt.unwrap_or(1),
            upstream_key: uuid(a.up.as_deref()),
            expires_at: at(a.exp.unwrap_or_default()),
        })),
        "mismatch" => {
            // Only a request with a fingerprint is compared with a stored one.
            let stored = a.stored.as_deref().and_then(hex_decode);
            Err(match (stored, given) {
                (Some(stored), Some(given)) => refusal::mismatch(&stored, given).into(),
                _ => return Err(unexpected("mismatch without two fingerprints")),
            })
        }
        "refused" => {
            let state = match a.state.as_deref() {
                Some("succeeded") => State::Succeeded,
                _ => State::Failed,
            };
            Err(refusal::repeat_refused(state, a.attempt.unwrap_or(1), Api::Client).into())
        }
        _ => {
            let retry_after = Duration::from_millis(a.retry.unwrap_or(0).max(0) as u64);
            if last || a.fin == Some(true) {
                Ok(Begin::InProgress(InProgress {
                    attempt: a.attempt.unwrap_or(1),
                    upstream_key: uuid(a.up.as_deref()),
                    retry_after,
                }))
            } else {
                return Ok(Err(retry_after));
            }
        }
    }))
}

/// The held script's arguments for a completion; what no store can hold is refused
/// before the script runs, so the claim stays held.
fn complete_args(
    fence: i64,
    response: Option<&Value>,
    succeeded: bool,
    cache_failure: Option<bool>,
) -> Result<[String; 8]> {
    storable_response(response)?;
    let text = response.map(Value::to_string);
    response_bytes(text.as_ref().map_or(0, String::len))?;
    let flag = |b: bool| if b { "1".to_string() } else { "0".to_string() };
    Ok([
        "complete".to_string(),
        fence.to_string(),
        flag(succeeded),
        flag(cache_failure.unwrap_or(false)),
        flag(response.is_some()),
        text.unwrap_or_default(),
        WEIGHT.to_string(),
        // A mark's outcome is unknown: the record keeps its unresolved bound.
        flag(Mark::of(response).is_some()),
    ])
}

/// The held script's answer to a completion.
fn completed(code: &str) -> Result<Completed> {
    match code {
        "succeeded" => Ok(Completed::Succeeded),
        "failed" => Ok(Completed::Failed),
        "absent" => Ok(Completed::Absent),
        // A completed record answers its state to its own fence, never `lost:completed`.
        code => Err(lost(code, Lost::Absent)),
    }
}

impl RedisStore {
    /// A store on the caller's connection; `prefix` keeps its keys apart from others on a
    /// shared Redis (for example `"idem:"`). A `MultiplexedConnection` does not connect
    /// again once it broke (a Redis restart, a network cut): every later call fails, and a
    /// holder cannot record the result of a tool that ran. [`RedisStore::connect`] makes a
    /// store that connects again.
    pub fn new(conn: MultiplexedConnection, prefix: impl Into<String>) -> RedisStore {
        RedisStore::on(conn, None, prefix.into())
    }

    /// A store on a connection of its own from `client` (with `config`: a response
    /// timeout, say), made again by the first call after one found it broken (dropped, or
    /// an I/O error), so that a holder's completion, retried under its fence, lands once
    /// Redis is back.
    pub async fn connect(
        client: redis::Client,
        config: redis::AsyncConnectionConfig,
        prefix: impl Into<String>,
    ) -> Result<RedisStore> {
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(redis_err)?;
        Ok(RedisStore::on(conn, Some((client, config)), prefix.into()))
    }

    fn on(
        conn: MultiplexedConnection,
        reconnect: Option<(redis::Client, redis::AsyncConnectionConfig)>,
        prefix: String,
    ) -> RedisStore {
        RedisStore {
            conn: std::sync::RwLock::new(conn),
            reconnect,
            broken: std::sync::atomic::AtomicBool::new(false),
            reconnecting: tokio::sync::Mutex::new(()),
            prefix,
            begin: Script::new(BEGIN),
            held: Script::new(HELD),
            lookup: Script::new(LOOKUP),
            forget: Script::new(FORGET),
        }
    }

    /// The connection for a call: made again first if the last call found it broken and
    /// the store knows how.
    async fn conn(&self) -> Result<MultiplexedConnection> {
        use std::sync::atomic::Ordering;
        if let Some((client, config)) = &self.reconnect {
            if self.broken.load(Ordering::SeqCst) {
                let _one = self.reconnecting.lock().await;
                if self.broken.load(Ordering::SeqCst) {
                    let fresh = client
                        .get_multiplexed_async_connection_with_config(config)
                        .await
                        .map_err(redis_err)?;
                    *self.conn.write().unwrap_or_else(|p| p.into_inner()) = fresh;
                    self.broken.store(false, Ordering::SeqCst);
                }
            }
        }
        Ok(self.conn.read().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// A call's failure; a broken connection is noted, to be made again by the next call.
    fn failed(&self, e: redis::RedisError) -> Error {
        if e.is_connection_dropped() || e.is_io_error() || e.is_connection_refusal() {
            self.broken.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        redis_err(e)
    }

    fn key(&self, scope: &str, key: &str) -> String {
        format!("{}{}:{scope}:{key}", self.prefix, scope.len())
    }

    /// The scope's hash of figures: its estimate and outcome counters. The word after the
    /// prefix keeps it apart from the records, whose names start with a digit there.
    fn figures(&self, scope: &str) -> String {
        format!("{}{FIGURES}{}:{scope}", self.prefix, scope.len())
    }

    async fn held(&self, scope: &str, key: &str, args: &[String]) -> Result<String> {
        let mut conn = self.conn().await?;
        self.held_invocation(scope, key, args)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))
    }

    fn held_invocation(&self, scope: &str, key: &str, args: &[String]) -> ScriptInvocation<'_> {
        let mut call = self.held.key(self.key(scope, key));
        call.key(self.figures(scope));
        for a in args {
            call.arg(a);
        }
        call
    }

    /// The begin script's call; `last`: an in_progress answer is the call's answer (and
    /// counted), rather than a reason to ask again after a pause.
    #[allow(clippy::too_many_arguments)]
    fn begin_invocation(
        &self,
        scope: &str,
        key: &str,
        fingerprint_hex: String,
        ttl: Duration,
        lease: Duration,
        o: &BeginOptions,
        last: bool,
    ) -> ScriptInvocation<'_> {
        // Checked by the caller (limits::unresolved_ttl) before anything was sent.
        let unresolved = o.unresolved_ttl.unwrap_or(DEFAULT_UNRESOLVED_TTL);
        let mut call = self.begin.key(self.key(scope, key));
        call.key(format!("{}fence", self.prefix))
            .key(self.figures(scope))
            .arg(fingerprint_hex)
            .arg(ttl.as_millis() as u64)
            .arg(lease.as_millis() as u64)
            .arg(o.on_cache_hit.unwrap_or(OnCacheHit::ReturnCached).as_sql())
            .arg(o.on_mismatch.unwrap_or(OnMismatch::Reject).as_sql())
            .arg(Uuid::new_v4().to_string())
            .arg(o.claim_token.map(|t| t.to_string()).unwrap_or_default())
            .arg(if last { "1" } else { "0" })
            .arg(FLOOR_MS)
            .arg(UNKNOWN_MS)
            .arg(unresolved.as_millis().min(u64::MAX as u128) as u64);
        call
    }

    /// A pipeline of one script's calls, in one round trip. A pipeline does not load a
    /// script Redis lacks (after a restart or SCRIPT FLUSH): every call then fails with
    /// NOSCRIPT before any ran, so the script is loaded and the pipeline sent once more.
    async fn pipelined(&self, pipe: &redis::Pipeline, script: &Script) -> Result<Vec<String>> {
        let mut conn = self.conn().await?;
        match pipe.query_async(&mut conn).await {
            Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                script
                    .prepare_invoke()
                    .load_async(&mut conn)
                    .await
                    .map_err(|e| self.failed(e))?;
                pipe.query_async(&mut conn)
                    .await
                    .map_err(|e| self.failed(e))
            }
            answer => answer.map_err(|e| self.failed(e)),
        }
    }
}

#[async_trait]
impl IdempotencyStore for RedisStore {
    async fn begin(&self, scope: &str, key: &str, o: &BeginOptions) -> Result<Begin> {
        scope_and_key(scope, key)?;
        let (ttl, lease) = begin_durations(o.ttl, o.lease, o.wait)?;
        unresolved_ttl(o.unresolved_ttl)?;
        let given = o
            .request
            .as_ref()
            .map(pg_idempotency_canon::hash_value)
            .transpose()?;
        let fp = given.as_ref().map(hex_of).unwrap_or_default();
        let deadline = tokio::time::Instant::now() + o.wait;
        let mut pause = Duration::from_millis(5);
        loop {
            // Asked once the wait is over, an in_progress answer is the call's answer and
            // is counted; before, the call asks again after a pause.
            let last = tokio::time::Instant::now() >= deadline;
            let mut conn = self.conn().await?;
            let raw: String = self
                .begin_invocation(scope, key, fp.clone(), ttl, lease, o, last)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            return match begun(&raw, &given, last)? {
                Err(retry_after) if !last => {
                    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                    tokio::time::sleep(
                        pause
                            .min(remaining)
                            .min(retry_after.max(Duration::from_millis(1))),
                    )
                    .await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                    continue;
                }
                Err(retry_after) => {
                    unreachable!("in_progress ({retry_after:?}) is the last ask's answer")
                }
                Ok(answer) => answer,
            };
        }
    }

    async fn begin_batch(
        &self,
        scope: &str,
        items: &[BatchBegin],
        o: &BatchOptions,
    ) -> Result<Vec<BatchBegun>> {
        // Every item is checked before any is sent, as the SQL API does.
        crate::batch::check_count(items.len())?;
        let (ttl, lease) = begin_durations(o.ttl, o.lease, Duration::ZERO)?;
        let mut given = Vec::with_capacity(items.len());
        for item in items {
            scope_and_key(scope, &item.key)?;
            given.push(
                item.request
                    .as_ref()
                    .map(pg_idempotency_canon::hash_value)
                    .transpose()?,
            );
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        // One pipeline: every item's script in one round trip, each atomic in Redis.
        let mut pipe = redis::pipe();
        for (item, fp) in items.iter().zip(&given) {
            pipe.invoke_script(&self.begin_invocation(
                scope,
                &item.key,
                fp.as_ref().map(hex_of).unwrap_or_default(),
                ttl,
                lease,
                &o.for_item(item),
                true,
            ));
        }
        let raws: Vec<String> = self.pipelined(&pipe, &self.begin).await?;
        raws.iter()
            .zip(&given)
            .map(|(raw, given)| {
                Ok(match begun(raw, given, true)? {
                    Ok(Ok(b)) => Ok(b),
                    Ok(Err(e)) => Err(e),
                    Err(_) => unreachable!("a batch's in_progress is an answer"),
                })
            })
            .collect()
    }

    async fn complete_batch(
        &self,
        scope: &str,
        items: &[BatchComplete],
    ) -> Result<Vec<BatchCompleted>> {
        crate::batch::check_count(items.len())?;
        let mut all_args = Vec::with_capacity(items.len());
        for i in items {
            scope_and_key(scope, &i.key)?;
            all_args.push(complete_args(
                i.fence,
                i.response.as_ref(),
                i.succeeded,
                i.cache_failure,
            )?);
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (i, args) in items.iter().zip(&all_args) {
            pipe.invoke_script(&self.held_invocation(scope, &i.key, args));
        }
        let codes: Vec<String> = self.pipelined(&pipe, &self.held).await?;
        Ok(codes.iter().map(|code| completed(code)).collect())
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
        scope_and_key(scope, key)?;
        let args = complete_args(fence, response, succeeded, cache_failure)?;
        completed(&self.held(scope, key, &args).await?)
    }

    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        scope_and_key(scope, key)?;
        match self
            .held(scope, key, &["release".into(), fence.to_string()])
            .await?
            .as_str()
        {
            "released" => Ok(()),
            code => Err(lost(code, Lost::ReleaseCompleted)),
        }
    }

    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime> {
        scope_and_key(scope, key)?;
        // As the server: a lease that is no duration at all is refused before the record is
        // read; one longer than the record's ttl only once the fence is known to hold it.
        if let Some(l) = lease {
            duration("lease", l)?;
        }
        let ms = lease.map(|l| l.as_millis().to_string()).unwrap_or_default();
        let args = [
            "extend".into(),
            fence.to_string(),
            ms,
            DEFAULT_LEASE.as_millis().to_string(),
        ];
        let answer = self.held(scope, key, &args).await?;
        match answer.split_once(':') {
            Some(("extended", until)) => Ok(at(until.parse::<f64>().unwrap_or(0.0) as i64)),
            Some(("invalid", ttl_ms)) => {
                let ttl = Duration::from_millis(ttl_ms.parse::<f64>().unwrap_or(0.0) as u64);
                match lease_for(lease, ttl) {
                    Err(e) => Err(e),
                    Ok(_) => Err(unexpected(&answer)),
                }
            }
            _ => Err(lost(&answer, Lost::ExtendCompleted)),
        }
    }

    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        scope_and_key(scope, key)?;
        let mut conn = self.conn().await?;
        let raw: Option<String> = self
            .lookup
            .key(self.key(scope, key))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        let Some(raw) = raw else { return Ok(None) };
        let s: Stored = serde_json::from_str(&raw)
            .map_err(|e| Error::new(ErrorKind::Serialization, format!("redis record: {e}")))?;
        Ok(Some(Record {
            state: state_named(&s.state)?,
            fence: s.fence,
            attempt: s.attempt,
            fingerprint: hex_decode(&s.fp),
            upstream_key: uuid(Some(&s.up)),
            response: json(s.resp.as_deref()),
            created_at: at(s.created),
            completed_at: s.completed.map(at),
            lease_until: s.lease.map(at),
            expires_at: at(s.exp),
        }))
    }

    async fn purge(&self) -> Result<u64> {
        Ok(0)
    }

    async fn forget(&self, scope: &str, key: &str) -> Result<bool> {
        scope_and_key(scope, key)?;
        let mut conn = self.conn().await?;
        let live: i64 = self
            .forget
            .key(self.key(scope, key))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        Ok(live == 1)
    }

    async fn metrics(&self) -> Result<Vec<ScopeMetrics>> {
        let mut conn = self.conn().await?;
        let (secs, micros): (String, String) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(e))?;
        let now =
            secs.parse::<i64>().unwrap_or(0) * 1000 + micros.parse::<i64>().unwrap_or(0) / 1000;
        let (records, figures) = self.names(&mut conn).await?;
        let mut rows: BTreeMap<String, ScopeMetrics> = BTreeMap::new();
        for batch in records.chunks(500) {
            let names: Vec<&String> = batch.iter().map(|(name, _)| name).collect();
            let values: Vec<Option<String>> = redis::cmd("MGET")
                .arg(&names)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            for ((_, scope), raw) in batch.iter().zip(values) {
                // Gone since the scan: expired or forgotten.
                let Some(raw) = raw else { continue };
                let s: Stored = serde_json::from_str(&raw).map_err(|e| {
                    Error::new(ErrorKind::Serialization, format!("redis record: {e}"))
                })?;
                rows.entry(scope.clone())
                    .or_insert_with(|| ScopeMetrics::local(scope))
                    .count(
                        state_named(&s.state)?,
                        !s.is_live(now),
                        s.lease.is_some_and(|l| l <= now),
                        Duration::from_millis((now - s.created).max(0) as u64),
                    );
            }
        }
        for (name, scope) in figures {
            let counts: Vec<(String, i64)> = redis::cmd("HGETALL")
                .arg(&name)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(e))?;
            let mut c = OutcomeCounts::default();
            for (field, n) in counts {
                let n = n.max(0) as u64;
                match field.as_str() {
                    "claimed" => c.claimed = n,
                    "replay" => c.replay = n,
                    "in_progress" => c.in_progress = n,
                    "mismatch" => c.mismatch = n,
                    _ => {}
                }
            }
            rows.entry(scope.clone())
                .or_insert_with(|| ScopeMetrics::local(&scope))
                .outcomes = Some(c);
        }
        Ok(rows.into_values().collect())
    }

    /// Over `connect`: the server, database, user and prefix (every store connected so
    /// shares the records). Over a caller's connection (`new`): this handle only.
    fn identity(&self) -> Option<String> {
        let (client, _) = self.reconnect.as_ref()?;
        let info = client.get_connection_info();
        Some(format!(
            "redis {} db {} user {:?} prefix {:?}",
            info.addr, info.redis.db, info.redis.username, self.prefix
        ))
    }
}

impl RedisStore {
    /// Every record's name and every hash of figures under the prefix, each with its scope.
    #[allow(clippy::type_complexity)]
    async fn names(
        &self,
        conn: &mut MultiplexedConnection,
    ) -> Result<(Vec<(String, String)>, Vec<(String, String)>)> {
        let pattern = format!("{}*", glob_escaped(&self.prefix));
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await
                .map_err(|e| self.failed(e))?;
            // A key may come back twice from one scan.
            seen.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let (mut records, mut figures) = (Vec::new(), Vec::new());
        for name in seen {
            let Some(rest) = name.strip_prefix(&self.prefix) else {
                continue;
            };
            if let Some(named) = rest.strip_prefix(FIGURES) {
                if let Some(scope) = scope_of(named) {
                    let scope = scope.to_string();
                    figures.push((name, scope));
                }
            } else if rest.starts_with(|c: char| c.is_ascii_digit()) {
                if let Some(scope) = scope_of(rest) {
                    let scope = scope.to_string();
                    records.push((name, scope));
                }
            }
        }
        Ok((records, figures))
    }
}

/// The scope of `<scope length>:<scope>...`.
fn scope_of(named: &str) -> Option<&str> {
    let (len, rest) = named.split_once(':')?;
    rest.get(..len.parse::<usize>().ok()?)
}

/// `text` matched literally by a SCAN pattern.
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex_of(b: &[u8; 32]) -> String {
    pg_idempotency_canon::key_of(b)
}

fn hex_decode(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
