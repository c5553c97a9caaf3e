//! The tool dispatcher: a registry of named async tools (JSON in, JSON out) whose calls are
//! deduplicated by an idempotency store, so that an agent re-running a tool call gets the
//! first run's result instead of a second side effect.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tracing::Instrument;

use crate::error::{Error, ErrorKind, Result};
use crate::idempotent::{Idempotent, KeyStrategy, KeySupplier};
use crate::memory::MemoryStore;
use crate::retry::Attempt;
use crate::store::IdempotencyStore;
use crate::toolkit::Toolkit;
use crate::types::{Begin, BeginOptions, Claim};
use crate::unanswered::Unanswered;

/// A tool's own failure: what to report (and, if its settings cache failures, replay).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// `ToolFailed` unless the tool knows better (a web action reports `Http`).
    pub kind: ErrorKind,
    pub message: String,
    pub response: Option<Value>,
    /// Another attempt may succeed (a timeout upstream, a 503).
    pub retryable: bool,
    /// When the next attempt is worth making, if the tool was told (a provider's
    /// `Retry-After`). `Retry` waits that long instead of its own backoff.
    pub retry_after: Option<Duration>,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ErrorKind::ToolFailed,
            message: message.into(),
            response: None,
            retryable: false,
            retry_after: None,
        }
    }
}

/// What a tool knows of the call it runs.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The call's idempotency key (a fresh uuid under `KeyStrategy::Uuid`; None under
    /// `KeyStrategy::None`). The same on every attempt of the call, a takeover included.
    pub key: Option<String>,
    /// The record's upstream key (deduplicated calls only): stable across takeovers.
    pub upstream_key: Option<uuid::Uuid>,
    pub attempt: i32,
}

#[async_trait]
pub trait Tool: Send + Sync {
    async fn call(&self, input: Value) -> std::result::Result<Value, ToolError>;

    /// Runs the call knowing its keys; tools that send them upstream override this.
    async fn call_with(
        &self,
        input: Value,
        _ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        self.call(input).await
    }

    /// Refuses an input the tool can never run with, before anything is claimed or sent
    /// (an `InvalidArgument`, with a detail and a hint). Every input passes by default.
    fn check(&self, _input: &Value) -> Result<()> {
        Ok(())
    }

    /// The kind a remembered failure of this tool replays as: what its own failures are
    /// (`ToolFailed`; a web action's are `Http`).
    fn failure_kind(&self) -> ErrorKind {
        ErrorKind::ToolFailed
    }
}

struct FnTool<F>(F);

#[async_trait]
impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value) -> Fut + Send + Sync,
    Fut: Future<Output = std::result::Result<Value, ToolError>> + Send,
{
    async fn call(&self, input: Value) -> std::result::Result<Value, ToolError> {
        (self.0)(input).await
    }
}

/// A tool from an async closure.
pub fn tool_fn<F, Fut>(f: F) -> Arc<dyn Tool>
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Value, ToolError>> + Send + 'static,
{
    Arc::new(FnTool(f))
}

/// How much a tool needs deduplication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencyHint {
    /// A repeat must not repeat the side effect: the tool must be deduplicated.
    Required,
    /// Deduplicated when its settings say so.
    BestEffort,
}

/// A tool and how its calls are handled.
#[derive(Clone)]
pub struct ToolSpec {
    pub name: String,
    pub tool: Arc<dyn Tool>,
    /// Its own settings; what they leave unset is its toolkit's, then the dispatcher's
    /// defaults (None: all unset).
    pub idempotent: Option<Idempotent>,
    pub side_effect: bool,
    pub hint: IdempotencyHint,
}

impl ToolSpec {
    pub fn new(name: impl Into<String>, tool: Arc<dyn Tool>) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            tool,
            idempotent: None,
            side_effect: true,
            hint: IdempotencyHint::Required,
        }
    }
    pub fn idempotent(mut self, idempotent: Idempotent) -> ToolSpec {
        self.idempotent = Some(idempotent);
        self
    }
    pub fn side_effect(mut self, side_effect: bool) -> ToolSpec {
        self.side_effect = side_effect;
        self
    }
    pub fn hint(mut self, hint: IdempotencyHint) -> ToolSpec {
        self.hint = hint;
        self
    }
    /// A side effect whose repeat must not repeat it: such a tool must be deduplicated,
    /// and running it on a store that is not durable is warned about.
    pub fn requires_idempotency(&self) -> bool {
        self.side_effect && self.hint == IdempotencyHint::Required
    }
}

/// What a dispatch did.
#[derive(Debug, Clone, PartialEq)]
pub enum Dispatched {
    /// The tool ran now.
    Ran(Value),
    /// An earlier call's result.
    Replayed(Value),
    /// Another attempt is running the call: ask again after `retry_after`.
    InProgress { retry_after: Duration },
}

impl Dispatched {
    /// For [`Retry::run`](crate::Retry::run): a call still running elsewhere is tried
    /// again after its `retry_after` (the store's estimate of its time left); any other
    /// answer is done.
    pub fn attempt(self) -> Attempt<Dispatched> {
        match self {
            Dispatched::InProgress { retry_after } => Attempt::Again {
                after: Some(retry_after),
            },
            done => Attempt::Done(done),
        }
    }
}

pub struct Dispatcher {
    store: Arc<dyn IdempotencyStore>,
    defaults: Idempotent,
    tools: RwLock<HashMap<String, Arc<Registered>>>,
    /// Whether the not-durable store was warned about (once per dispatcher).
    warned: AtomicBool,
    unanswered: Unanswered,
}

/// A registered tool with its settings layered: its own over its toolkit's over the
/// dispatcher's defaults (a call's own, where given, go over these at dispatch).
struct Registered {
    spec: ToolSpec,
    idem: Idempotent,
    /// Its toolkit's key supplier, for `KeyStrategy::Explicit(None)`.
    key_supplier: Option<KeySupplier>,
}

/// Aborts the tool's task if the dispatch is dropped (its timeout fired).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn tool_failed(e: ToolError) -> Error {
    Error::new(e.kind, e.message)
        .with_response(e.response)
        .with_retryable(e.retryable)
        .with_retry_after(e.retry_after)
}

impl Default for Dispatcher {
    /// On a [`MemoryStore`], as [`Dispatcher::in_memory`].
    fn default() -> Dispatcher {
        Dispatcher::in_memory()
    }
}

impl Dispatcher {
    pub fn new(store: Arc<dyn IdempotencyStore>) -> Dispatcher {
        Dispatcher {
            store,
            defaults: Idempotent::default(),
            tools: RwLock::default(),
            warned: AtomicBool::new(false),
            unanswered: Unanswered::default(),
        }
    }

    /// The default store: a new [`MemoryStore`], in this process only (the framework's
    /// `InMemoryIdempotencyStore`). The first call of a tool that requires idempotency logs
    /// one warning, since a restart forgets its calls and other processes never see them.
    pub fn in_memory() -> Dispatcher {
        Dispatcher::new(Arc::new(MemoryStore::new()))
    }

    /// What every tool leaves unset, below its toolkit's settings (field by field).
    pub fn with_defaults(mut self, idem: Idempotent) -> Dispatcher {
        self.defaults = idem;
        self
    }

    /// Registers a tool. A tool with a side effect whose idempotency is Required must be
    /// deduplicated (HashInput or Explicit) with a positive ttl: refused here, not at its
    /// first call.
    pub fn register(&self, spec: ToolSpec) -> Result<()> {
        self.register_group(vec![spec], &Idempotent::default(), None)
    }

    /// Registers a toolkit's tools, each with its own settings over the toolkit's, field by
    /// field. One refused tool refuses them all: none is registered.
    pub fn register_toolkit(&self, toolkit: Toolkit) -> Result<()> {
        self.register_group(
            toolkit.members,
            &toolkit.idempotent,
            toolkit.key_supplier.as_ref(),
        )
    }

    pub(crate) fn register_group(
        &self,
        specs: Vec<ToolSpec>,
        kit: &Idempotent,
        key_supplier: Option<&KeySupplier>,
    ) -> Result<()> {
        let mut registered = Vec::with_capacity(specs.len());
        for spec in specs {
            let own = spec.idempotent.clone().unwrap_or_default();
            let reg = Registered {
                idem: own.or(kit).or(&self.defaults),
                key_supplier: key_supplier.cloned(),
                spec,
            };
            settle(&reg, None)?;
            registered.push(reg);
        }
        let mut tools = self.tools.write().unwrap_or_else(|p| p.into_inner());
        for reg in registered {
            tools.insert(reg.spec.name.clone(), Arc::new(reg));
        }
        Ok(())
    }

    /// Runs a call of tool `name`, or answers it from the store.
    pub async fn dispatch(&self, name: &str, input: Value) -> Result<Dispatched> {
        self.dispatch_inner(name, input, None).await
    }

    /// As `dispatch`, with this call's own settings over the tool's (field by field): a
    /// longer `wait` or `timeout` for one call, say.
    pub async fn dispatch_with(
        &self,
        name: &str,
        input: Value,
        call: &Idempotent,
    ) -> Result<Dispatched> {
        self.dispatch_inner(name, input, Some(call)).await
    }

    async fn dispatch_inner(
        &self,
        name: &str,
        input: Value,
        call: Option<&Idempotent>,
    ) -> Result<Dispatched> {
        let reg = {
            let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
            tools.get(name).cloned()
        }
        .ok_or_else(|| Error::new(ErrorKind::UnknownTool, format!("no tool named {name}")))?;
        let idem = settle(&reg, call)?;
        if reg.spec.requires_idempotency()
            && !self.store.durable()
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(tool = name, "a tool that requires idempotency runs on an in-memory store: repeats are caught only within this process, and not after a restart");
        }
        let span = tracing::info_span!(
            "idempotent_call",
            scope = name,
            outcome = tracing::field::Empty,
            attempt = tracing::field::Empty
        );
        let work = self.call(&reg.spec, &idem, input).instrument(span);
        match idem.timeout {
            Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| {
                Error::new(ErrorKind::Timeout, format!("tool {name} timed out after {limit:?}"))
                    .with_hint("The claim stays held until its lease lapses; a retry after that takes it over.")
            })?,
            None => work.await,
        }
    }

    async fn call(&self, spec: &ToolSpec, idem: &Idempotent, input: Value) -> Result<Dispatched> {
        spec.tool.check(&input)?;
        let strategy = idem.key_strategy();
        let key = match &strategy {
            KeyStrategy::HashInput => canon::key_of(&canon::hash_value(&input)?),
            // settle() gave every Explicit strategy a supplier.
            KeyStrategy::Explicit(supplier) => match supplier.as_ref().and_then(|f| f(&input)) {
                Some(k) if !k.trim().is_empty() => k,
                _ => {
                    return Err(Error::invalid(format!(
                        "tool {} got a blank key from its key supplier",
                        spec.name
                    ))
                    .with_hint("An Explicit key strategy must name every call."))
                }
            },
            KeyStrategy::Uuid | KeyStrategy::None => {
                // Nothing is deduplicated here; a Uuid call still names itself upstream.
                let key =
                    matches!(strategy, KeyStrategy::Uuid).then(|| uuid::Uuid::new_v4().to_string());
                let ctx = CallContext {
                    key,
                    upstream_key: None,
                    attempt: 1,
                };
                let v = spec.tool.call_with(input, ctx).await.map_err(tool_failed)?;
                return Ok(Dispatched::Ran(v));
            }
        };
        tracing::debug!(key = %key, "idempotency key");
        let options = BeginOptions {
            request: idem.fingerprint_rule().request(&strategy, &input),
            ttl: idem.ttl,
            lease: idem.lease,
            on_cache_hit: idem.on_cache_hit,
            on_mismatch: idem.on_mismatch,
            wait: idem.wait.unwrap_or(Duration::ZERO),
            claim_token: Some(self.unanswered.token_for(&spec.name, &key)),
        };
        let span = tracing::Span::current();
        let begun = match self.store.begin(&spec.name, &key, &options).await {
            Err(e) if e.outcome_unknown() => {
                // The server may have claimed the call: the next call of this key repeats
                // this attempt, so that it gets the claim back rather than waiting it out.
                if let Some(token) = options.claim_token {
                    self.unanswered.remember(&spec.name, &key, token);
                }
                return Err(e);
            }
            begun => begun?,
        };
        match begun {
            Begin::Claimed(claim) => {
                span.record("outcome", "claimed");
                span.record("attempt", claim.attempt);
                self.run(spec, idem, &key, claim, input).await
            }
            Begin::Replay(r) => {
                span.record("outcome", "replay");
                span.record("attempt", r.attempt);
                if r.succeeded {
                    Ok(Dispatched::Replayed(r.response.unwrap_or(Value::Null)))
                } else {
                    Err(Error::new(
                        spec.tool.failure_kind(),
                        format!("tool {} failed (remembered)", spec.name),
                    )
                    .with_response(r.response)
                    .with_replayed())
                }
            }
            Begin::InProgress(p) => {
                span.record("outcome", "in_progress");
                span.record("attempt", p.attempt);
                Ok(Dispatched::InProgress {
                    retry_after: p.retry_after,
                })
            }
        }
    }

    /// Runs a claimed call, extending its lease while it runs, and records the result.
    async fn run(
        &self,
        spec: &ToolSpec,
        idem: &Idempotent,
        key: &str,
        claim: Claim,
        input: Value,
    ) -> Result<Dispatched> {
        let tool = spec.tool.clone();
        let ctx = CallContext {
            key: Some(key.to_string()),
            upstream_key: Some(claim.upstream_key),
            attempt: claim.attempt,
        };
        let task = tokio::spawn(async move { tool.call_with(input, ctx).await });
        let _abort = AbortOnDrop(task.abort_handle());
        let lease = claim
            .lease_until
            .duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::from_secs(1));
        let beat = (lease / 3).max(Duration::from_millis(50));
        tokio::pin!(task);
        let outcome = loop {
            tokio::select! {
                done = &mut task => break done,
                _ = tokio::time::sleep(beat) => {
                    // A heartbeat: the lease is extended while the tool runs.
                    if let Err(e) = self.store.extend(&spec.name, key, claim.fence, idem.lease).await {
                        tracing::warn!(error = %e, "could not extend the lease");
                    }
                }
            }
        };
        match outcome {
            Ok(Ok(v)) => {
                self.store
                    .complete(&spec.name, key, claim.fence, Some(&v), true, None)
                    .await?;
                Ok(Dispatched::Ran(v))
            }
            Ok(Err(e)) => {
                self.store
                    .complete(
                        &spec.name,
                        key,
                        claim.fence,
                        e.response.as_ref(),
                        false,
                        idem.cache_failures,
                    )
                    .await?;
                Err(tool_failed(e))
            }
            Err(join) => {
                // A panic: the side effect's fate is unknown. Recorded as a failure, which
                // the store remembers where failures are cached (the tool's setting, else
                // the scope's policy, else the server's default: not cached, and then the
                // record is gone, so a retry runs the call again).
                let message = format!("tool {} panicked", spec.name);
                let response = serde_json::json!({"error": message});
                self.store
                    .complete(
                        &spec.name,
                        key,
                        claim.fence,
                        Some(&response),
                        false,
                        idem.cache_failures,
                    )
                    .await?;
                tracing::error!(error = %join, "{message}");
                Err(Error::new(ErrorKind::ToolFailed, message))
            }
        }
    }
}

/// The settings a call of `reg` runs with: the call's own (if any) over the tool's layered
/// ones, an Explicit strategy without a supplier given its toolkit's, and refused if a tool
/// that requires idempotency would not be deduplicated.
fn settle(reg: &Registered, call: Option<&Idempotent>) -> Result<Idempotent> {
    let spec = &reg.spec;
    let mut idem = match call {
        Some(call) => call.or(&reg.idem),
        None => reg.idem.clone(),
    };
    if let Some(KeyStrategy::Explicit(None)) = idem.strategy {
        let Some(supplier) = &reg.key_supplier else {
            return Err(Error::invalid(format!(
                "tool {} has an Explicit key strategy but no key supplier",
                spec.name
            ))
            .with_hint("Give the tool one (Idempotent::key_supplier) or register it in a Toolkit with Toolkit::key_supplier."));
        };
        idem.strategy = Some(KeyStrategy::Explicit(Some(supplier.clone())));
    }
    idem.fingerprint_rule().check()?;
    if spec.requires_idempotency() {
        let strategy = idem.key_strategy();
        if !strategy.deduplicates() {
            return Err(Error::invalid(format!("tool {} requires idempotency but its key strategy is {strategy:?}", spec.name))
                .with_hint("Use KeyStrategy::HashInput or KeyStrategy::Explicit for a tool with a side effect."));
        }
        if idem.ttl.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(format!(
                "tool {} requires idempotency but its ttl is zero",
                spec.name
            )));
        }
    }
    Ok(idem)
}
