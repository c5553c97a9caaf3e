//! `MemoryStore`: the embedded default. The same semantics as the SQL API (fences, leases,
//! takeovers, failure caching, mismatch, wait), in this process only: it is not durable and
//! not shared, so it deduplicates retries within one process and forgets everything when
//! the process ends. There are no per-scope policies here: unset options take the SQL
//! API's defaults (ttl 1 hour, lease 1 minute capped by the ttl).
//!
//! The record's state machine exists four times: the extension
//! (pg_idempotency/src/begin.rs, holder.rs, lookup.rs, store.rs), the portable PL/pgSQL
//! variant (sql/pg_idempotency.sql), this file, and `RedisStore` (client/src/redis.rs with
//! client/src/redis_lua/). The SQL two are the reference; client/tests/parity.rs runs one
//! table of scenarios over every store and holds them equal.

pub(crate) mod refusal;
mod scopes;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::error::Result;
use crate::limits::{
    begin_durations, duration, lease_for, response as storable_response, response_size,
    scope_and_key,
};
use crate::store::IdempotencyStore;
use crate::types::*;
use refusal::{lease_lost, Lost};
use scopes::Scopes;

struct Entry {
    state: State,
    fence: i64,
    attempt: i32,
    fingerprint: Option<[u8; 32]>,
    upstream_key: Uuid,
    response: Option<Value>,
    created_at: SystemTime,
    /// When the running attempt claimed the call (a takeover's own claim): the start of
    /// the claim-to-completion time its completion adds to the scope's estimate.
    claimed_at: SystemTime,
    completed_at: Option<SystemTime>,
    lease_until: Option<SystemTime>,
    expires_at: SystemTime,
    ttl: Duration,
    /// The token of the claim holding the entry, and whether that claim was a takeover.
    claim_token: Option<Uuid>,
    recovered: bool,
}

#[derive(Default)]
pub struct MemoryStore {
    entries: Mutex<HashMap<(String, String), Entry>>,
    /// Taken after `entries` when both are held.
    scopes: Mutex<Scopes>,
    fences: AtomicI64,
    changed: Notify,
}

fn until(t: SystemTime, now: SystemTime) -> Duration {
    t.duration_since(now).unwrap_or(Duration::ZERO)
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn next_fence(&self) -> i64 {
        self.fences.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The live entry of a holder's fence, or why there is none.
    fn held<'a>(
        entries: &'a mut HashMap<(String, String), Entry>,
        id: &(String, String),
        fence: i64,
        now: SystemTime,
    ) -> Result<&'a mut Entry> {
        match entries.get_mut(id) {
            Some(e) if e.expires_at > now && e.fence == fence => Ok(e),
            Some(e) if e.expires_at > now => Err(lease_lost(Lost::fence(e.fence, fence))),
            _ => Err(lease_lost(Lost::Absent)),
        }
    }

    fn scopes(&self) -> std::sync::MutexGuard<'_, Scopes> {
        self.scopes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `begin` after its arguments were checked; its answer is counted by the caller.
    async fn decide(
        &self,
        scope: &str,
        key: &str,
        o: &BeginOptions,
        ttl: Duration,
        lease: Duration,
        fingerprint: Option<[u8; 32]>,
    ) -> Result<Begin> {
        let on_cache_hit = o.on_cache_hit.unwrap_or(OnCacheHit::ReturnCached);
        let id = (scope.to_string(), key.to_string());
        let deadline = tokio::time::Instant::now() + o.wait;
        loop {
            let notified = self.changed.notified();
            let wait_for = {
                let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
                let now = SystemTime::now();
                let claim =
                    |attempt: i32, recovered: bool, upstream_key: Uuid, created_at, fp, fence| {
                        (
                            Claim {
                                fence,
                                attempt,
                                recovered,
                                upstream_key,
                                lease_until: now + lease,
                                expires_at: now + ttl,
                            },
                            Entry {
                                state: State::InProgress,
                                fence,
                                attempt,
                                fingerprint: fp,
                                upstream_key,
                                response: None,
                                created_at,
                                claimed_at: now,
                                completed_at: None,
                                lease_until: Some(now + lease),
                                expires_at: now + ttl,
                                ttl,
                                claim_token: o.claim_token,
                                recovered,
                            },
                        )
                    };
                let live = entries.get(&id).filter(|e| e.expires_at > now);
                let Some(e) = live else {
                    let (c, entry) = claim(
                        1,
                        false,
                        Uuid::new_v4(),
                        now,
                        fingerprint,
                        self.next_fence(),
                    );
                    entries.insert(id, entry);
                    return Ok(Begin::Claimed(c));
                };
                if let (Some(given), Some(stored)) = (&fingerprint, &e.fingerprint) {
                    if given != stored && o.on_mismatch != Some(OnMismatch::Ignore) {
                        return Err(refusal::mismatch(stored, given));
                    }
                }
                let lease_live = e.lease_until.is_some_and(|l| l > now);
                let again = |e: &Entry, recovered: bool| {
                    claim(
                        e.attempt + 1,
                        recovered,
                        e.upstream_key,
                        e.created_at,
                        e.fingerprint.or(fingerprint),
                        0,
                    )
                };
                match (e.state, on_cache_hit) {
                    (State::InProgress, _)
                        if lease_live
                            && o.claim_token.is_some()
                            && o.claim_token == e.claim_token =>
                    {
                        // A repeat of the attempt that claimed (its answer was lost).
                        return Ok(Begin::Claimed(Claim {
                            fence: e.fence,
                            attempt: e.attempt,
                            recovered: e.recovered,
                            upstream_key: e.upstream_key,
                            lease_until: e.lease_until.unwrap_or(now),
                            expires_at: e.expires_at,
                        }));
                    }
                    (State::InProgress, _) if lease_live => {
                        let remaining =
                            deadline.saturating_duration_since(tokio::time::Instant::now());
                        if remaining.is_zero() {
                            let retry_after = self.scopes().retry_after(
                                scope,
                                e.claimed_at,
                                e.lease_until.unwrap_or(now),
                                now,
                            );
                            return Ok(Begin::InProgress(InProgress {
                                attempt: e.attempt,
                                upstream_key: e.upstream_key,
                                retry_after,
                            }));
                        }
                        remaining
                            .min(until(e.lease_until.unwrap_or(now), now))
                            .max(Duration::from_millis(1))
                    }
                    (State::Succeeded | State::Failed, OnCacheHit::FailFast) => {
                        return Err(refusal::repeat_refused(
                            e.state == State::Succeeded,
                            e.attempt,
                        ));
                    }
                    (State::InProgress, _) | (State::Failed, OnCacheHit::ReturnCachedIfSuccess) => {
                        let recovered = e.state == State::InProgress;
                        let previous = e.fence;
                        let (mut c, mut entry) = again(e, recovered);
                        let fence = self.next_fence().max(previous + 1);
                        c.fence = fence;
                        entry.fence = fence;
                        entry.expires_at = entry.expires_at.max(e.expires_at);
                        c.expires_at = entry.expires_at;
                        entries.insert(id, entry);
                        return Ok(Begin::Claimed(c));
                    }
                    (State::Succeeded | State::Failed, _) => {
                        return Ok(Begin::Replay(Replay {
                            succeeded: e.state == State::Succeeded,
                            response: e.response.clone(),
                            attempt: e.attempt,
                            upstream_key: e.upstream_key,
                            expires_at: e.expires_at,
                        }));
                    }
                }
            };
            // Wake when the holder completes or releases, or when its lease may lapse.
            let _ = tokio::time::timeout(wait_for, notified).await;
        }
    }
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn begin(&self, scope: &str, key: &str, o: &BeginOptions) -> Result<Begin> {
        scope_and_key(scope, key)?;
        let (ttl, lease) = begin_durations(o.ttl, o.lease, o.wait)?;
        let fingerprint = o.request.as_ref().map(canon::hash_value).transpose()?;
        // Counted once per call, by its final answer (after any wait), as the extension
        // counts.
        let answer = self.decide(scope, key, o, ttl, lease, fingerprint).await;
        self.scopes().count(scope, &answer);
        answer
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
        // What no store can hold is refused before the claim is touched: it stays held.
        scope_and_key(scope, key)?;
        storable_response(response)?;
        response_size(response)?;
        let id = (scope.to_string(), key.to_string());
        let now = SystemTime::now();
        let result = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let e = Self::held(&mut entries, &id, fence, now)?;
            match e.state {
                State::Succeeded => return Ok(Completed::Succeeded),
                State::Failed => return Ok(Completed::Failed),
                State::InProgress => {}
            }
            // A claimed attempt completed: its claim-to-completion time is a sample.
            self.scopes().sample(scope, e.claimed_at, now);
            if !succeeded && !cache_failure.unwrap_or(false) {
                entries.remove(&id);
                Completed::Absent
            } else {
                e.state = if succeeded {
                    State::Succeeded
                } else {
                    State::Failed
                };
                e.response = response.cloned();
                e.completed_at = Some(now);
                e.lease_until = None;
                e.expires_at = now + e.ttl;
                if succeeded {
                    Completed::Succeeded
                } else {
                    Completed::Failed
                }
            }
        };
        self.changed.notify_waiters();
        Ok(result)
    }

    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        scope_and_key(scope, key)?;
        let id = (scope.to_string(), key.to_string());
        {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let e = Self::held(&mut entries, &id, fence, SystemTime::now())?;
            if e.state != State::InProgress {
                return Err(lease_lost(Lost::ReleaseCompleted));
            }
            entries.remove(&id);
        }
        self.changed.notify_waiters();
        Ok(())
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
        let lease = lease.map(|l| duration("lease", l)).transpose()?;
        let id = (scope.to_string(), key.to_string());
        let now = SystemTime::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = Self::held(&mut entries, &id, fence, now)?;
        if e.state != State::InProgress {
            return Err(lease_lost(Lost::ExtendCompleted));
        }
        let lease = lease_for(lease, e.ttl)?;
        let lease_until = now + lease;
        e.lease_until = Some(lease_until);
        e.expires_at = e.expires_at.max(lease_until);
        Ok(lease_until)
    }

    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        scope_and_key(scope, key)?;
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let now = SystemTime::now();
        Ok(entries
            .get(&(scope.to_string(), key.to_string()))
            .filter(|e| e.expires_at > now)
            .map(|e| Record {
                state: e.state,
                fence: e.fence,
                attempt: e.attempt,
                fingerprint: e.fingerprint,
                upstream_key: e.upstream_key,
                response: e.response.clone(),
                created_at: e.created_at,
                completed_at: e.completed_at,
                lease_until: e.lease_until,
                expires_at: e.expires_at,
            }))
    }

    fn durable(&self) -> bool {
        false
    }

    async fn forget(&self, scope: &str, key: &str) -> Result<bool> {
        scope_and_key(scope, key)?;
        let id = (scope.to_string(), key.to_string());
        let removed = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            entries.remove(&id)
        };
        // A duplicate waiting for a forgotten claim claims the call now.
        self.changed.notify_waiters();
        Ok(removed.is_some_and(|e| e.expires_at > SystemTime::now()))
    }

    async fn metrics(&self) -> Result<Vec<ScopeMetrics>> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let scopes = self.scopes();
        let now = SystemTime::now();
        let mut rows: BTreeMap<&str, ScopeMetrics> = BTreeMap::new();
        for ((scope, _), e) in entries.iter() {
            rows.entry(scope)
                .or_insert_with(|| ScopeMetrics::local(scope))
                .count(
                    e.state,
                    e.expires_at <= now,
                    e.lease_until.is_some_and(|l| l <= now),
                    now.duration_since(e.created_at).unwrap_or_default(),
                );
        }
        for (scope, figures) in scopes.iter() {
            rows.entry(scope)
                .or_insert_with(|| ScopeMetrics::local(scope))
                .outcomes = Some(figures.counts);
        }
        Ok(rows.into_values().collect())
    }

    async fn purge(&self) -> Result<u64> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let now = SystemTime::now();
        let before = entries.len();
        entries.retain(|_, e| e.expires_at > now);
        Ok((before - entries.len()) as u64)
    }
}
