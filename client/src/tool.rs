//! The tool model: what a tool is, what it is told of its call, how it fails, and how it is
//! registered. The dispatcher (`dispatcher.rs`) runs tools; this file only describes them.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{ErrorKind, Result};
use crate::idempotent::Idempotent;
use crate::lease::{LeaseState, LeaseWatch};
pub use crate::tool_error::{FailureRecord, ToolError};

/// What a tool knows of the call it runs.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The call's idempotency key (a fresh uuid under `KeyStrategy::Uuid`; None under
    /// `KeyStrategy::None`). The same on every attempt of the call, a takeover included.
    pub key: Option<String>,
    /// The record's upstream key (deduplicated calls only): stable across takeovers.
    pub upstream_key: Option<uuid::Uuid>,
    pub attempt: i32,
    /// The claim's fence (deduplicated calls only): a tool that writes somewhere of its own
    /// can store it beside its write and refuse a write under a lower one.
    pub fence: Option<i64>,
    /// This attempt took the call over from an earlier one whose lease lapsed: that attempt
    /// may have performed the effect (see `Idempotent::on_unknown_outcome`).
    pub recovered: bool,
    /// What the caller attached to this call alone (`Dispatcher::dispatch_call`): a bearer
    /// token for a web action, say. Never stored, never part of the key or fingerprint.
    pub extensions: http::Extensions,
    pub(crate) lease: LeaseWatch,
}

impl CallContext {
    /// Whether this attempt's claim is known lost, or may be: the store refused its
    /// heartbeat (another attempt took the call over, or an operator forgot it), or the
    /// heartbeat could not reach the store until the lease ended (another attempt may take
    /// it over now). A tool checks it before an irreversible step. Never true for a call
    /// that holds no claim (a call under `KeyStrategy::None` or `Uuid`).
    pub fn lease_is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves as soon as the lease is lost (as [`lease_is_lost`](Self::lease_is_lost));
    /// never for a call that holds no claim. For `tokio::select!` beside a long step.
    pub async fn lease_lost(&self) {
        self.lease.lost().await
    }

    /// `Err` (kind `LeaseLost`) once the lease is lost: `ctx.ensure_lease()?` before an
    /// irreversible step, so that an attempt that may have been taken over stops short.
    /// The error releases the claim ([`FailureRecord::Release`]) whatever the settings'
    /// `cache_failures` say: the tool stopped before its effect, so the call never ran and
    /// a retry runs it (it is never remembered as a failure). Its message says which it is:
    /// lost (the store refused the heartbeat) or unconfirmed (the store could not be
    /// reached until the lease ended; nobody may have taken the call over).
    pub fn ensure_lease(&self) -> std::result::Result<(), ToolError> {
        let message = match self.lease.state() {
            LeaseState::Held | LeaseState::Failing => return Ok(()),
            LeaseState::Lost => "the call's lease was lost (another attempt holds the call, or it was forgotten): stopped before its effect",
            LeaseState::Unconfirmed => "the call's lease is unconfirmed (the store could not be reached until it ended, so another attempt may take the call over): stopped before its effect",
        };
        Err(ToolError {
            kind: ErrorKind::LeaseLost,
            message: message.into(),
            response: None,
            retryable: true,
            retry_after: None,
            record: FailureRecord::Release,
        })
    }
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

struct FnToolWith<F>(F);

#[async_trait]
impl<F, Fut> Tool for FnToolWith<F>
where
    F: Fn(Value, CallContext) -> Fut + Send + Sync,
    Fut: Future<Output = std::result::Result<Value, ToolError>> + Send,
{
    async fn call(&self, input: Value) -> std::result::Result<Value, ToolError> {
        (self.0)(input, CallContext::default()).await
    }
    async fn call_with(
        &self,
        input: Value,
        ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        (self.0)(input, ctx).await
    }
}

/// A tool from an async closure that is told its call ([`CallContext`]): its keys, its
/// fence, and whether its lease is lost.
pub fn tool_fn_with<F, Fut>(f: F) -> Arc<dyn Tool>
where
    F: Fn(Value, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Value, ToolError>> + Send + 'static,
{
    Arc::new(FnToolWith(f))
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
    /// BestEffort unless declared: a tool is deduplicated when it has settings; with
    /// `Required`, registration refuses it without.
    pub hint: IdempotencyHint,
    /// What an agent is shown of the tool.
    pub description: Option<String>,
    /// The JSON Schema of its input, where known.
    pub input_schema: Option<Value>,
}

impl ToolSpec {
    pub fn new(name: impl Into<String>, tool: Arc<dyn Tool>) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            tool,
            idempotent: None,
            side_effect: true,
            hint: IdempotencyHint::BestEffort,
            description: None,
            input_schema: None,
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
    pub fn description(mut self, description: impl Into<String>) -> ToolSpec {
        self.description = Some(description.into());
        self
    }
    pub fn input_schema(mut self, schema: Value) -> ToolSpec {
        self.input_schema = Some(schema);
        self
    }
    /// Declares that a repeat must not repeat the side effect (the Java framework's
    /// `idempotencyHint = REQUIRED`): registration then refuses the tool unless it is
    /// deduplicated (HashInput or Explicit, a positive ttl).
    pub fn required(self) -> ToolSpec {
        self.side_effect(true).hint(IdempotencyHint::Required)
    }
    /// A side effect whose repeat must not repeat it: such a tool must be deduplicated,
    /// and running it on a store that is not durable is warned about.
    pub fn requires_idempotency(&self) -> bool {
        self.side_effect && self.hint == IdempotencyHint::Required
    }
}
