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

mod dispatcher;
mod error;
mod exactly_once;
mod holder;
mod idempotent;
mod lease;
mod limits;
pub mod marks;
mod memory;
mod pg;
#[cfg(feature = "redis")]
mod redis;
mod replayed;
mod resolve;
mod retry;
mod savepoint;
mod store;
mod tool;
mod toolkit;
mod tx_tool;
mod types;
mod unanswered;
mod web;

pub use dispatcher::{Call, Dispatched, Dispatcher};
pub use error::{Error, ErrorKind, Result};
pub use exactly_once::ExactlyOnce;
pub use idempotent::{
    Fingerprint, FingerprintFn, Idempotent, KeyStrategy, KeySupplier, OnUnknownOutcome, Reconcile,
    ReconcileFn, Reconciled,
};
pub use memory::MemoryStore;
pub use pg::{PgSource, PgStore};
#[cfg(feature = "redis")]
pub use redis::RedisStore;
pub use retry::{Attempt, Retry};
pub use store::IdempotencyStore;
pub use tool::{tool_fn, tool_fn_with, CallContext, IdempotencyHint, Tool, ToolError, ToolSpec};
pub use toolkit::Toolkit;
pub use tx_tool::{tx_tool_fn, tx_tool_fn_with, TxFuture, TxTool, TxToolSpec};
pub use types::*;
pub use web::{Action, Headers, Params, UpstreamKey, WebExecutor};

/// The HTTP method type of web actions.
pub use reqwest::Method;
