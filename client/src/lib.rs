//! pg_idempotency's Rust client: idempotency stores with the semantics of the SQL API.
//!
//! - [`PgStore`] over the SQL API of the extension (or the portable SQL), through a
//!   deadpool pool, a tokio-postgres client, or the caller's own transaction;
//! - [`MemoryStore`], in this process only (not durable, not shared);
//! - `RedisStore` (the `redis` feature), shared between processes, as durable as the Redis
//!   server is configured to be.
//!
//! All three implement [`IdempotencyStore`]; one behaviour suite (`client/tests/parity.rs`)
//! runs over all three. On top of them: the tool [`Dispatcher`] and the [`WebExecutor`] for
//! HTTP actions; [`ExactlyOnce`] for tools whose effect is a write to the same database,
//! called inside the caller's transaction.

mod batch;
mod call;
mod dispatcher;
mod error;
mod exactly_once;
mod holder;
mod idempotent;
mod joined_wait;
mod lease;
mod limits;
mod live_holders;
mod macro_support;
pub mod marks;
mod memory;
mod pg;
mod pg_sql;
mod plproxy;
mod ran;
#[cfg(feature = "redis")]
mod redis;
mod replayed;
mod resolve;
mod retry;
mod savepoint;
mod store;
mod tool;
mod tool_error;
mod toolkit;
mod tx_tool;
mod typed;
mod types;
mod unanswered;
mod web;

pub use batch::{
    BatchBegin, BatchBegun, BatchComplete, BatchCompleted, BatchOptions, MAX_BATCH_ITEMS,
};
pub use call::{Call, Dispatched};
pub use dispatcher::{Dispatcher, ToolInfo};
pub use error::{Error, ErrorKind, Result};
pub use exactly_once::ExactlyOnce;
pub use idempotent::{
    Fingerprint, FingerprintFn, Idempotent, KeyStrategy, KeySupplier, OnUnknownOutcome, Reconcile,
    ReconcileFn, Reconciled,
};
pub use joined_wait::JoinedWait;
pub use memory::MemoryStore;
pub use pg::{PgSource, PgStore};
/// `#[tool]`: an async function of a typed input made a tool, with its description, input
/// schema and settings (the Java framework's `@Tool` and `@Idempotent`). See docs/client.md.
pub use pg_idempotency_client_macros::tool;
pub use pg_sql::{ApiSchema, StatementMode};
#[cfg(feature = "redis")]
pub use redis::RedisStore;
pub use retry::{Attempt, Retry};
pub use store::IdempotencyStore;
pub use tool::{
    tool_fn, tool_fn_with, CallContext, FailureRecord, IdempotencyHint, Tool, ToolError, ToolSpec,
};
pub use toolkit::Toolkit;
pub use tx_tool::{tx_tool_fn, tx_tool_fn_with, TxFuture, TxTool, TxToolSpec};
pub use typed::{input_schema_of, typed_tool, Shared, ToolResult, TypedFn};
pub use types::*;
pub use web::{Action, Headers, Params, UpstreamKey, WebExecutor};

/// The schema crate typed tools derive their input's JSON Schema with
/// (`#[derive(schemars::JsonSchema)]`).
pub use schemars;

#[doc(hidden)]
pub mod __private {
    pub use crate::macro_support::{is_call_context, is_tool_input, is_tool_result};
}

/// The HTTP method type of web actions.
pub use reqwest::Method;
