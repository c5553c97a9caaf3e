//! `MemoryStore`: the embedded default. The same semantics as the SQL API (fences, leases,
//! takeovers, failure caching, mismatch, wait), in this process only: it is not durable and
//! not shared, so it deduplicates retries within one process and forgets everything when
//! the process ends. There are no per-scope policies here: unset options take the SQL
//! API's defaults (ttl 1 hour, lease 1 minute capped by the ttl).
//!
//! Every decision about a record (claim, take over, replay, in progress, wait, mismatch,
//! refuse; whether a fence holds it; what a completion leaves) is pg_idempotency_protocol::decide's, the
//! same functions the extension (pg_idempotency/src/begin.rs, holder.rs) takes them
//! through, and every refusal is worded by pg_idempotency_protocol::refusal; this file reads and writes
//! the entries under its mutex. The PL/pgSQL variant (sql/pg_idempotency.sql) and
//! `RedisStore`'s scripts (client/src/redis_lua/) state the same rules in their own
//! languages; client/tests/parity.rs runs one table of scenarios over every store and
//! holds them equal.

mod scopes;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pg_idempotency_protocol::decide::{self, Holding, Lost, Op, Read, Step};
use pg_idempotency_protocol::refusal::{self, Api};
use serde_json::Value;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::batch::{BatchBegin, BatchBegun, BatchComplete, BatchCompleted, BatchOptions};
use crate::error::{Error, Result};
use crate::limits::{
    begin_durations, duration, lease_for, response as storable_response, response_size,
    scope_and_key, unresolved_ttl,
};
use crate::marks::Mark;
use crate::store::IdempotencyStore;
use crate::types::*;
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
    /// Until when the entry stays past its expiry while its outcome is unknown: a claim's
    /// lease end plus its unresolved bound (moved with the lease), a mark's completion plus
    /// the same bound; None for a result.
    unresolved_until: Option<SystemTime>,
    /// The length of the lease the holder last took (its claim, a takeover, its last
    /// extension): whether it has stopped beating (pg_idempotency_protocol::estimate).
    lease: Option<Duration>,
}

#[derive(Default)]
pub struct MemoryStore {
    entries: Mutex<HashMap<(String, String), Entry>>,
    /// Taken after `entries` when both are held.
    scopes: Mutex<Scopes>,
    fences: AtomicI64,
    changed: Notify,
}

impl Entry {
    /// The entry as the state machine reads it.
    fn read(&self) -> Read<'_, SystemTime> {
        Read {
            state: self.state,
            fence: self.fence,
            attempt: self.attempt,
            fingerprint: self.fingerprint.as_ref().map(|f| &f[..]),
            lease_until: self.lease_until,
            expires_at: self.expires_at,
            claimed_at: self.claimed_at,
            claim_token: self.claim_token.map(|t| *t.as_bytes()),
            unresolved_until: self.unresolved_until,
            lease_us: self
                .lease
                .filter(|_| self.lease_until.is_some())
                .map(|l| l.as_micros().min(u64::MAX as u128) as u64),
        }
    }

    /// Live until its expiry, or while its outcome is unknown until its unresolved bound.
    fn is_live(&self, now: SystemTime) -> bool {
        self.read().is_live(now)
    }

    /// The unresolved bound this entry's claim was given.
    fn unresolved_ttl(&self) -> Option<Duration> {
        let (until, lease) = (self.unresolved_until?, self.lease_until?);
        until.duration_since(lease).ok()
    }

    /// The entry a claim leaves.
    fn claimed(
        c: &Claim,
        fingerprint: Option<&[u8]>,
        created_at: SystemTime,
        now: SystemTime,
        ttl: Duration,
        claim_token: Option<Uuid>,
        unresolved_ttl: Duration,
    ) -> Entry {
        Entry {
            state: State::InProgress,
            fence: c.fence,
            attempt: c.attempt,
            // Fingerprints are this store's own, 32 bytes each.
            fingerprint: fingerprint.and_then(|f| f.try_into().ok()),
            upstream_key: c.upstream_key,
            response: None,
            created_at,
            claimed_at: now,
            completed_at: None,
            lease_until: Some(c.lease_until),
            expires_at: c.expires_at,
            ttl,
            claim_token,
            recovered: c.recovered,
            unresolved_until: Some(c.lease_until + unresolved_ttl),
            lease: c.lease_until.duration_since(now).ok(),
        }
    }
}

/// A call's durations, checked: its ttl, its lease, and its unresolved bound.
#[derive(Clone, Copy)]
struct Times {
    ttl: Duration,
    lease: Duration,
    unresolved_ttl: Duration,
}

fn lease_lost(why: Lost) -> Error {
    refusal::lease_lost(why, Api::Client).into()
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn next_fence(&self) -> i64 {
        self.fences.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The live entry of a holder's fence and what it holds, or why there is none.
    fn held<'a>(
        entries: &'a mut HashMap<(String, String), Entry>,
        id: &(String, String),
        fence: i64,
        now: SystemTime,
        op: Op,
    ) -> Result<(&'a mut Entry, Holding)> {
        let e = entries.get_mut(id);
        let holding = decide::held(e.as_deref().map(Entry::read).as_ref(), fence, now, op)
            .map_err(lease_lost)?;
        // `held` holds only a live entry.
        e.map(|e| (e, holding))
            .ok_or_else(|| lease_lost(Lost::Absent))
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
        times: Times,
        fingerprint: Option<[u8; 32]>,
    ) -> Result<Begin> {
        let Times {
            ttl,
            lease,
            unresolved_ttl,
        } = times;
        let call = decide::Call {
            fingerprint: fingerprint.as_ref().map(|f| &f[..]),
            on_cache_hit: o.on_cache_hit.unwrap_or(OnCacheHit::ReturnCached),
            on_mismatch: o.on_mismatch.unwrap_or(OnMismatch::Reject),
            claim_token: o.claim_token.map(|t| *t.as_bytes()),
        };
        let id = (scope.to_string(), key.to_string());
        let deadline = tokio::time::Instant::now() + o.wait;
        loop {
            let notified = self.changed.notified();
            let wait_for = {
                let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
                let now = SystemTime::now();
                let e = entries.get(&id);
                let step = decide::begin(
                    e.map(Entry::read).as_ref(),
                    &call,
                    now,
                    || micros(deadline.saturating_duration_since(tokio::time::Instant::now())),
                    || self.scopes().estimate_us(scope),
                );
                match (step, e) {
                    (Step::Claim, _) | (_, None) => {
                        let c = Claim {
                            fence: self.next_fence(),
                            attempt: 1,
                            recovered: false,
                            upstream_key: Uuid::new_v4(),
                            lease_until: now + lease,
                            expires_at: now + ttl,
                        };
                        let entry = Entry::claimed(
                            &c,
                            call.fingerprint,
                            now,
                            now,
                            ttl,
                            o.claim_token,
                            unresolved_ttl,
                        );
                        entries.insert(id, entry);
                        return Ok(Begin::Claimed(c));
                    }
                    (Step::TakeOver { recovered }, Some(e)) => {
                        let again =
                            decide::take_over(&e.read(), &call, self.next_fence(), now + ttl);
                        let c = Claim {
                            fence: again.fence,
                            attempt: again.attempt,
                            recovered,
                            upstream_key: e.upstream_key,
                            lease_until: now + lease,
                            expires_at: again.expires_at,
                        };
                        let entry = Entry::claimed(
                            &c,
                            again.fingerprint,
                            e.created_at,
                            now,
                            ttl,
                            o.claim_token,
                            unresolved_ttl,
                        );
                        entries.insert(id, entry);
                        return Ok(Begin::Claimed(c));
                    }
                    (Step::OwnClaim, Some(e)) => {
                        return Ok(Begin::Claimed(Claim {
                            fence: e.fence,
                            attempt: e.attempt,
                            recovered: e.recovered,
                            upstream_key: e.upstream_key,
                            lease_until: e.lease_until.unwrap_or(now),
                            expires_at: e.expires_at,
                        }));
                    }
                    (Step::Replay, Some(e)) => {
                        return Ok(Begin::Replay(Replay {
                            succeeded: e.state == State::Succeeded,
                            response: e.response.clone(),
                            attempt: e.attempt,
                            upstream_key: e.upstream_key,
                            expires_at: e.expires_at,
                        }));
                    }
                    (Step::InProgress { retry_after_us }, Some(e)) => {
                        return Ok(Begin::InProgress(InProgress {
                            attempt: e.attempt,
                            upstream_key: e.upstream_key,
                            retry_after: Duration::from_micros(retry_after_us),
                        }));
                    }
                    (Step::Mismatch { stored, given }, Some(_)) => {
                        return Err(refusal::mismatch(stored, given).into());
                    }
                    (Step::RepeatRefused, Some(e)) => {
                        return Err(refusal::repeat_refused(e.state, e.attempt, Api::Client).into());
                    }
                    // Wake when the holder completes or releases, when its lease may lapse,
                    // or when it would count as stopped unless it beat meanwhile.
                    (
                        Step::Wait {
                            wait_left_us,
                            lease_left_us,
                            stops_in_us,
                        },
                        Some(_),
                    ) => Duration::from_micros(wait_left_us.min(lease_left_us).min(stops_in_us))
                        .max(Duration::from_millis(1)),
                }
            };
            let _ = tokio::time::timeout(wait_for, notified).await;
        }
    }
}

#[async_trait]
impl IdempotencyStore for MemoryStore {
    async fn begin(&self, scope: &str, key: &str, o: &BeginOptions) -> Result<Begin> {
        scope_and_key(scope, key)?;
        let (ttl, lease) = begin_durations(o.ttl, o.lease, o.wait)?;
        let unresolved_ttl = unresolved_ttl(o.unresolved_ttl)?;
        let fingerprint = o
            .request
            .as_ref()
            .map(pg_idempotency_canon::hash_value)
            .transpose()?;
        // Counted once per call, by its final answer (after any wait), as the extension
        // counts.
        let times = Times {
            ttl,
            lease,
            unresolved_ttl,
        };
        let answer = self.decide(scope, key, o, times, fingerprint).await;
        self.scopes().count(scope, &answer);
        answer
    }

    /// Every item is checked before any is decided, as the SQL API does; then each is
    /// decided as `begin` decides it.
    async fn begin_batch(
        &self,
        scope: &str,
        items: &[BatchBegin],
        o: &BatchOptions,
    ) -> Result<Vec<BatchBegun>> {
        crate::batch::check_count(items.len())?;
        begin_durations(o.ttl, o.lease, Duration::ZERO)?;
        for item in items {
            scope_and_key(scope, &item.key)?;
            if let Some(request) = &item.request {
                pg_idempotency_canon::hash_value(request)?;
            }
        }
        crate::store::begin_item_by_item(self, scope, items, o).await
    }

    async fn complete_batch(
        &self,
        scope: &str,
        items: &[BatchComplete],
    ) -> Result<Vec<BatchCompleted>> {
        crate::batch::check_count(items.len())?;
        for i in items {
            scope_and_key(scope, &i.key)?;
            storable_response(i.response.as_ref())?;
            response_size(i.response.as_ref())?;
        }
        crate::store::complete_item_by_item(self, scope, items).await
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
            let (e, holding) = Self::held(&mut entries, &id, fence, now, Op::Complete)?;
            if let Holding::Completed(kept) = holding {
                // Completed by this very fence before: keep what is stored.
                return Ok(kept.into());
            }
            // A claimed attempt completed: its claim-to-completion time is a sample.
            self.scopes().sample(scope, e.claimed_at, now);
            let completion = decide::completion(succeeded, cache_failure.unwrap_or(false));
            match completion.state() {
                // An uncached failure leaves nothing behind, so a retry runs the call again.
                None => {
                    entries.remove(&id);
                }
                Some(state) => {
                    // A mark's outcome is unknown: kept for the claim's unresolved bound.
                    e.unresolved_until = match (Mark::of(response), e.unresolved_ttl()) {
                        (Some(_), Some(bound)) => Some(now + bound),
                        _ => None,
                    };
                    e.state = state;
                    e.response = response.cloned();
                    e.completed_at = Some(now);
                    e.lease_until = None;
                    e.expires_at = now + e.ttl;
                }
            }
            completion.into()
        };
        self.changed.notify_waiters();
        Ok(result)
    }

    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        scope_and_key(scope, key)?;
        let id = (scope.to_string(), key.to_string());
        {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            // A completed entry is refused (Lost::ReleaseCompleted): only a running one is held.
            Self::held(&mut entries, &id, fence, SystemTime::now(), Op::Release)?;
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
        // A completed entry is refused (Lost::ExtendCompleted): only a running one is held.
        let (e, _) = Self::held(&mut entries, &id, fence, now, Op::Extend)?;
        let lease = lease_for(lease, e.ttl)?;
        let lease_until = now + lease;
        // The unresolved bound moves with the lease, by the same length.
        e.unresolved_until = e.unresolved_ttl().map(|bound| lease_until + bound);
        e.lease_until = Some(lease_until);
        e.lease = Some(lease);
        e.expires_at = decide::extended_expiry(e.expires_at, lease_until);
        Ok(lease_until)
    }

    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        scope_and_key(scope, key)?;
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let now = SystemTime::now();
        Ok(entries
            .get(&(scope.to_string(), key.to_string()))
            .filter(|e| e.is_live(now))
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
        Ok(removed.is_some_and(|e| e.is_live(SystemTime::now())))
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
                    !e.is_live(now),
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
        entries.retain(|_, e| e.is_live(now));
        Ok((before - entries.len()) as u64)
    }
}
