//! The tool dispatcher: a registry of named async tools (JSON in, JSON out) whose calls are
//! deduplicated by an idempotency store, so that an agent re-running a tool call gets the
//! first run's result instead of a second side effect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::call::{tool_failed, Call, Dispatched};
use crate::error::{Error, ErrorKind, Result};
use crate::holder::{self, Held, Recorded};
use crate::idempotent::{Idempotent, KeyStrategy, KeySupplier};
use crate::lease::LeaseState;
use crate::live_holders;
use crate::memory::MemoryStore;
use crate::ran::Ran;
use crate::replayed::outcome_unknown;
use crate::resolve;
use crate::store::IdempotencyStore;
use crate::tool::{CallContext, ToolSpec};
use crate::toolkit::Toolkit;
use crate::types::{Begin, Claim, Replay};
use crate::unanswered::Unanswered;

mod join;
mod listing;
pub use listing::ToolInfo;

pub struct Dispatcher {
    store: Arc<dyn IdempotencyStore>,
    /// What every tool leaves unset; Some also means every tool is deduplicated.
    defaults: Option<Idempotent>,
    tools: RwLock<HashMap<String, Arc<Registered>>>,
    /// Whether the not-durable store was warned about (once per dispatcher).
    warned: AtomicBool,
    unanswered: Unanswered,
}

/// A registered tool with the settings that govern it: its own, else its toolkit's, else
/// the dispatcher's defaults (see `resolve::layer`); a call's own, where given, go over
/// these field by field at dispatch.
struct Registered {
    spec: ToolSpec,
    idem: Idempotent,
    /// Whether any level gave it settings: without, it is not deduplicated (the
    /// framework's tool without `@Idempotent`), unless a call names a strategy.
    protected: bool,
    /// Its toolkit's key supplier, for `KeyStrategy::Explicit(None)`.
    key_supplier: Option<KeySupplier>,
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
            defaults: None,
            tools: RwLock::default(),
            warned: AtomicBool::new(false),
            unanswered: Unanswered::default(),
        }
    }

    /// The default store: a new [`MemoryStore`], in this process only (the Java framework's
    /// `InMemoryIdempotencyStore`). The first call of a tool that requires idempotency logs
    /// one warning, since a restart forgets its calls and other processes never see them.
    pub fn in_memory() -> Dispatcher {
        Dispatcher::new(Arc::new(MemoryStore::new()))
    }

    /// The settings of every tool that has none of its own and no toolkit's (settings on a
    /// tool or toolkit replace these whole, unless they opt in to inheriting:
    /// `Idempotent::inherit_unset`). With defaults, every tool with a side effect is
    /// deduplicated (HashInput unless a level names a strategy); a read-only tool
    /// (`side_effect(false)`) never is by defaults, only by settings of its own. Without
    /// defaults (the default), only tools whose own or toolkit's settings exist are.
    pub fn with_defaults(mut self, idem: Idempotent) -> Dispatcher {
        self.defaults = Some(idem);
        self
    }

    /// The store calls are remembered in.
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        &self.store
    }

    /// Registers a tool. A tool with a side effect whose idempotency is Required must be
    /// deduplicated (HashInput or Explicit) with a positive ttl: refused here, not at its
    /// first call.
    pub fn register(&self, spec: ToolSpec) -> Result<()> {
        self.register_group(vec![spec], None, None)
    }

    /// Registers a toolkit's tools: a tool with settings of its own runs by them alone
    /// (the toolkit's fill its unset fields only where it says `Idempotent::inherit_unset`),
    /// a tool without runs by the toolkit's; a read-only tool is deduplicated only by its
    /// own. One refused tool refuses them all: none is registered.
    pub fn register_toolkit(&self, toolkit: Toolkit) -> Result<()> {
        self.register_group(
            toolkit.members,
            toolkit.idempotent.as_ref(),
            toolkit.key_supplier.as_ref(),
        )
    }

    pub(crate) fn register_group(
        &self,
        specs: Vec<ToolSpec>,
        kit: Option<&Idempotent>,
        key_supplier: Option<&KeySupplier>,
    ) -> Result<()> {
        let mut registered = Vec::with_capacity(specs.len());
        for spec in specs {
            let read_only = !spec.side_effect;
            let (idem, protected) = resolve::layer(
                spec.idempotent.as_ref(),
                kit,
                self.defaults.as_ref(),
                read_only,
            );
            if read_only && !protected && (kit.is_some() || self.defaults.is_some()) {
                // Said once, where the choice is made: a read is never deduplicated by
                // settings it does not carry itself (ToolInfo::deduplicated says so too).
                tracing::info!(
                    tool = %spec.name,
                    "a read-only tool is not deduplicated by its toolkit's settings or the dispatcher's defaults; give it settings of its own (ToolSpec::idempotent) to deduplicate its calls"
                );
            }
            let reg = Registered {
                idem,
                protected,
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

    /// The registered tools, by name.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        let mut specs: Vec<ToolSpec> = tools.values().map(|r| r.spec.clone()).collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }

    /// Runs a call of tool `name`, or answers it from the store.
    pub async fn dispatch(&self, name: &str, input: Value) -> Result<Dispatched> {
        self.dispatch_call(name, input, Call::default()).await
    }

    /// As `dispatch`, with this call's own settings over the tool's (field by field): a
    /// longer `wait` or `timeout` for one call, say.
    pub async fn dispatch_with(
        &self,
        name: &str,
        input: Value,
        call: &Idempotent,
    ) -> Result<Dispatched> {
        self.dispatch_call(name, input, Call::new().idempotent(call.clone()))
            .await
    }

    /// As `dispatch`, with what this call alone carries ([`Call`]): its own settings, and
    /// values for the tool's context.
    pub async fn dispatch_call(&self, name: &str, input: Value, call: Call) -> Result<Dispatched> {
        let reg = {
            let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
            tools.get(name).cloned()
        }
        .ok_or_else(|| {
            Error::new(ErrorKind::UnknownTool, format!("no tool named {name}"))
                .with_hint("Register it first (Dispatcher::register); Dispatcher::tools lists the registered ones.")
        })?;
        let idem = settle(&reg, call.idempotent.as_ref())?;
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
        let deadline = idem.timeout.map(|limit| (Instant::now() + limit, limit));
        self.call(&reg.spec, &idem, input, call.extensions, deadline)
            .instrument(span)
            .await
    }

    async fn call(
        &self,
        spec: &ToolSpec,
        idem: &Idempotent,
        input: Value,
        extensions: http::Extensions,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Dispatched> {
        spec.tool.check(&input)?;
        let strategy = idem.key_strategy();
        let key = match resolve::call_key(&spec.name, &strategy, &input)? {
            Some(key) => key,
            None => {
                // Nothing is deduplicated here; a Uuid call still names itself upstream.
                let key =
                    matches!(strategy, KeyStrategy::Uuid).then(|| uuid::Uuid::new_v4().to_string());
                let ctx = CallContext {
                    key,
                    attempt: 1,
                    extensions,
                    ..CallContext::default()
                };
                let v = within(deadline, &spec.name, spec.tool.call_with(input, ctx))
                    .await?
                    .map_err(tool_failed)?;
                return Ok(Dispatched::Ran(v));
            }
        };
        tracing::debug!(key = %key, "idempotency key");
        // A holder of this call alive in this process is joined, never raced through the
        // store (whose lease for it may have lapsed in an outage).
        // (A store whose duplicates wait under a cap admits the joined wait too:
        // admit_joined_wait.)
        let identity = live_holders::identity_of(&self.store);
        let live = self
            .store
            .joins_live_holders()
            .then(|| live_holders::find(&identity, &spec.name, &key))
            .flatten();
        if let Some(joined) = live {
            if let Some(answer) =
                join::join(self.store.as_ref(), spec, &key, idem, joined, deadline).await?
            {
                return Ok(answer);
            }
        }
        let mut options = resolve::begin_options(idem, &strategy, &input);
        options.claim_token = Some(self.unanswered.token_for(&spec.name, &key));
        let span = tracing::Span::current();
        let begun = match within(
            deadline,
            &spec.name,
            self.store.begin(&spec.name, &key, &options),
        )
        .await?
        {
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
                let ctx = CallContext {
                    key: Some(key.clone()),
                    upstream_key: Some(claim.upstream_key),
                    attempt: claim.attempt,
                    recovered: claim.recovered,
                    extensions,
                    ..CallContext::default()
                };
                self.run(spec, idem, key, claim, input, ctx, deadline).await
            }
            Begin::Replay(r) => {
                span.record("outcome", "replay");
                span.record("attempt", r.attempt);
                replayed(spec, r)
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

    /// Runs a claimed call in a holder of its own (the tool, its lease's heartbeat, its
    /// recording), and answers what became of it.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &self,
        spec: &ToolSpec,
        idem: &Idempotent,
        key: String,
        claim: Claim,
        input: Value,
        ctx: CallContext,
        deadline: Option<(Instant, Duration)>,
    ) -> Result<Dispatched> {
        let plan = resolve::plan(idem, &claim);
        // While the store cannot take the result, the dispatch waits for it as long as the
        // lease (its heartbeat keeps the call from being taken over meanwhile), within its
        // timeout; after that it answers, and the holder goes on in the background.
        let record_wait = idem.lease.unwrap_or_else(|| {
            claim
                .lease_until
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::from_secs(1))
        });
        let live = live_holders::register(
            live_holders::identity_of(&self.store),
            &spec.name,
            &key,
            record_wait,
        );
        let held = Held {
            store: self.store.clone(),
            scope: spec.name.clone(),
            key,
            claim,
            lease: idem.lease,
            cache_failures: idem.cache_failures,
            live: Some(live),
        };
        let mut running = holder::start(held, plan, spec.tool.clone(), input, ctx);
        let ran = match deadline {
            Some((at, limit)) => match tokio::time::timeout_at(at, &mut running.ran).await {
                Ok(ran) => ran,
                Err(_) => {
                    running.abandon();
                    return Err(timed_out(&spec.name, limit));
                }
            },
            None => (&mut running.ran).await,
        }
        .map_err(|_| {
            Error::new(
                ErrorKind::ToolFailed,
                format!("tool {} never answered: its holder ended", spec.name),
            )
        })?;
        let wait_until = Instant::now() + record_wait;
        let wait_until = deadline.map_or(wait_until, |(at, _)| at.min(wait_until));
        let recorded = tokio::time::timeout_at(wait_until, &mut running.recorded).await;
        let lease = running.lease.state();
        running.abandon();
        match recorded {
            Ok(Ok(recorded)) => answer(spec, ran, recorded),
            _ => match ran {
                Ran::Failed(e) => Err(tool_failed(e)),
                // What is true of the lease now: kept by the heartbeat, or not renewed
                // (the store out of reach), which no retry in this process races.
                ran if lease == LeaseState::Held => Err(unrecorded(
                    spec,
                    &ran,
                    "The store did not take the result in time; it is tried again in the background under the claim's fence, with the lease kept by its heartbeat, until the store takes it or the record expires. Calls of this key in this process wait for it meanwhile.",
                )),
                ran => Err(unrecorded(
                    spec,
                    &ran,
                    "The store cannot be reached: the result is tried again in the background under the claim's fence until the store takes it or the record expires. The lease could not be renewed, so once it lapses another process may take the call over and run it again (unless the upstream deduplicates on the call's key); calls of this key in this process wait for this holder instead.",
                )),
            },
        }
    }
}

/// Waits for `work` until the call's deadline, if it has one.
async fn within<T>(
    deadline: Option<(Instant, Duration)>,
    name: &str,
    work: impl std::future::Future<Output = T>,
) -> Result<T> {
    match deadline {
        Some((at, limit)) => tokio::time::timeout_at(at, work)
            .await
            .map_err(|_| timed_out(name, limit)),
        None => Ok(work.await),
    }
}

fn timed_out(name: &str, limit: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("tool {name} timed out after {limit:?}"),
    )
    .with_hint("The claim stays held until its lease lapses; a retry after that takes it over.")
}

/// A remembered answer: the result, the failure, or the client's mark in their place.
fn replayed(spec: &ToolSpec, r: Replay) -> Result<Dispatched> {
    crate::replayed::replayed(&spec.name, spec.tool.failure_kind(), r)
}

fn unrecorded(spec: &ToolSpec, ran: &Ran, detail: &str) -> Error {
    let result = match ran {
        Ran::Ok(v) | Ran::Found(v) => Some(v.clone()),
        _ => None,
    };
    Error::new(
        ErrorKind::Unrecorded,
        format!("tool {} ran, but its result is not recorded", spec.name),
    )
    .with_detail(detail.to_string())
    .with_hint("The effect happened: use the result this error carries (Error::response), and do not run the call again by other means.")
    .with_response(result)
}

/// The dispatch's answer for what the tool did and what became of its record.
fn answer(spec: &ToolSpec, ran: Ran, recorded: Recorded) -> Result<Dispatched> {
    match (ran, recorded) {
        // A failure is the tool's own, whatever became of its record: not recording it
        // leaves the call to run again, as an uncached failure does.
        (Ran::Failed(e), _) => Err(tool_failed(e)),
        (Ran::Panicked(message), _) => Err(Error::new(ErrorKind::ToolFailed, message)),
        (Ran::Refused(why), _) => Err(outcome_unknown(&spec.name, why)),
        (Ran::Ok(v), Recorded::Yes) => Ok(Dispatched::Ran(v)),
        (Ran::Found(v), Recorded::Yes) => Ok(Dispatched::Replayed(v)),
        (ran, Recorded::LeaseLost) => {
            let mut e = unrecorded(spec, &ran, "Its lease was lost while it ran: another attempt took the call over (or an operator forgot it), so this result was not recorded, and the other attempt may perform the effect again unless the upstream deduplicates on the call's key.");
            e.kind = ErrorKind::LeaseLost;
            Err(e)
        }
        (ran, Recorded::Unstorable(cause)) => Err(unrecorded(
            spec,
            &ran,
            &format!("The store cannot keep it ({cause}); a mark was recorded in its place, so every retry is told the effect happened (ErrorKind::Unrecorded) instead of running it again."),
        )),
        // Only a failure is abandoned, and a failure is answered above.
        (ran, Recorded::Abandoned) => Err(unrecorded(
            spec,
            &ran,
            "Its claim was left to lapse: an attempt that takes it over decides by on_unknown_outcome.",
        )),
        (ran, Recorded::Expired) => Err(unrecorded(
            spec,
            &ran,
            "The store could not be reached until the record expired.",
        )),
    }
}

/// The settings a call of `reg` runs with (see `resolve::settle`).
fn settle(reg: &Registered, call: Option<&Idempotent>) -> Result<Idempotent> {
    resolve::settle(
        &reg.spec.name,
        reg.spec.requires_idempotency(),
        &reg.idem,
        reg.protected,
        reg.key_supplier.as_ref(),
        call,
    )
}
