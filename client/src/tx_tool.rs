//! The transactional tool model: a tool whose effect is a write to the database that keeps
//! its calls, given the caller's transaction so that the claim, its writes and the
//! completion commit or roll back together ([`ExactlyOnce`](crate::ExactlyOnce) runs them).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use tokio_postgres::Transaction;

use crate::error::{Error, ErrorKind, Result};
use crate::idempotent::Idempotent;
use crate::tool::{CallContext, FailureRecord, IdempotencyHint, ToolError};

/// What a transactional tool's closure returns: a boxed future that may borrow the
/// transaction (as sqlx's `transaction(|tx| Box::pin(async move { .. }))`).
pub type TxFuture<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<Value, ToolError>> + Send + 'a>>;

/// A tool that writes in the caller's transaction. Its writes, its call's claim and its
/// completion commit or roll back together.
#[async_trait]
pub trait TxTool: Send + Sync {
    async fn call(
        &self,
        tx: &Transaction<'_>,
        input: Value,
        ctx: CallContext,
    ) -> std::result::Result<Value, ToolError>;

    /// Refuses an input the tool can never run with, before anything is claimed (an
    /// `InvalidArgument`, with a detail and a hint). Every input passes by default.
    fn check(&self, _input: &Value) -> Result<()> {
        Ok(())
    }

    /// The kind a remembered failure of this tool replays as.
    fn failure_kind(&self) -> ErrorKind {
        ErrorKind::ToolFailed
    }
}

struct FnTxTool<F>(F);

#[async_trait]
impl<F> TxTool for FnTxTool<F>
where
    F: for<'a, 't> Fn(&'a Transaction<'t>, Value, CallContext) -> TxFuture<'a> + Send + Sync,
{
    async fn call(
        &self,
        tx: &Transaction<'_>,
        input: Value,
        ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        (self.0)(tx, input, ctx).await
    }
}

/// A transactional tool from a closure of the transaction and the input:
/// `tx_tool_fn(|tx, input| Box::pin(async move { tx.execute(..).await?; Ok(json!(..)) }))`
/// (a database error becomes the tool's failure with `?`).
pub fn tx_tool_fn<F>(f: F) -> Arc<dyn TxTool>
where
    F: for<'a, 't> Fn(&'a Transaction<'t>, Value) -> TxFuture<'a> + Send + Sync + 'static,
{
    Arc::new(FnTxToolPlain(f))
}

struct FnTxToolPlain<F>(F);

#[async_trait]
impl<F> TxTool for FnTxToolPlain<F>
where
    F: for<'a, 't> Fn(&'a Transaction<'t>, Value) -> TxFuture<'a> + Send + Sync,
{
    async fn call(
        &self,
        tx: &Transaction<'_>,
        input: Value,
        _ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        (self.0)(tx, input).await
    }
}

/// As [`tx_tool_fn`], for a closure that is also told its call ([`CallContext`]: its key,
/// upstream key, attempt and fence).
pub fn tx_tool_fn_with<F>(f: F) -> Arc<dyn TxTool>
where
    F: for<'a, 't> Fn(&'a Transaction<'t>, Value, CallContext) -> TxFuture<'a>
        + Send
        + Sync
        + 'static,
{
    Arc::new(FnTxTool(f))
}

/// A transactional tool and how its calls are deduplicated, as [`ToolSpec`](crate::ToolSpec)
/// is for the dispatcher's tools.
#[derive(Clone)]
pub struct TxToolSpec {
    pub name: String,
    pub tool: Arc<dyn TxTool>,
    /// Its own settings; what they leave unset is the registry's defaults (None: all unset,
    /// and the tool is not deduplicated unless the registry has defaults).
    pub idempotent: Option<Idempotent>,
    /// BestEffort unless declared; with `Required`, registration refuses the tool unless
    /// it is deduplicated.
    pub hint: IdempotencyHint,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
}

impl TxToolSpec {
    pub fn new(name: impl Into<String>, tool: Arc<dyn TxTool>) -> TxToolSpec {
        TxToolSpec {
            name: name.into(),
            tool,
            idempotent: None,
            hint: IdempotencyHint::BestEffort,
            description: None,
            input_schema: None,
        }
    }
    pub fn idempotent(mut self, idempotent: Idempotent) -> TxToolSpec {
        self.idempotent = Some(idempotent);
        self
    }
    /// A repeat must not repeat the write: registration refuses the tool unless it is
    /// deduplicated (HashInput or Explicit, a positive ttl).
    pub fn required(mut self) -> TxToolSpec {
        self.hint = IdempotencyHint::Required;
        self
    }
    pub fn description(mut self, description: impl Into<String>) -> TxToolSpec {
        self.description = Some(description.into());
        self
    }
    pub fn input_schema(mut self, schema: Value) -> TxToolSpec {
        self.input_schema = Some(schema);
        self
    }
    pub(crate) fn requires_idempotency(&self) -> bool {
        self.hint == IdempotencyHint::Required
    }
}

/// A database error in a transactional tool (`?` on its statements) is its failure: the
/// server's message, and its SQLSTATE in the response. A serialization failure or deadlock
/// keeps its kind (`Contention`): the caller retries the whole transaction.
impl From<tokio_postgres::Error> for ToolError {
    fn from(e: tokio_postgres::Error) -> ToolError {
        let sqlstate = e.code().map(|c| c.code().to_string());
        let contention = matches!(sqlstate.as_deref(), Some("40001" | "40P01"));
        let err = Error::from(e);
        ToolError {
            kind: if contention {
                ErrorKind::Contention
            } else {
                ErrorKind::ToolFailed
            },
            response: Some(json!({"error": err.message, "sqlstate": sqlstate})),
            message: err.to_string(),
            retryable: contention,
            retry_after: None,
            record: FailureRecord::Policy,
        }
    }
}
