//! pg_idempotency's Rust client: idempotency stores with the semantics of the SQL API.
//!
//! - [`PgStore`] over the SQL API of the extension (or the portable SQL), through a
//!   deadpool pool, a tokio-postgres client, or the caller's own transaction;
//! - [`MemoryStore`], in this process only (not durable, not shared).
//!
//! Both implement [`IdempotencyStore`]; one behaviour suite (`client/tests/`) runs over both.

mod dispatcher;
mod error;
mod idempotent;
mod limits;
mod memory;
mod pg;
#[cfg(feature = "redis")]
mod redis;
mod retry;
mod store;
mod toolkit;
mod types;
mod unanswered;
mod web;

pub use dispatcher::{
    tool_fn, CallContext, Dispatched, Dispatcher, IdempotencyHint, Tool, ToolError, ToolSpec,
};
pub use error::{Error, ErrorKind, Result};
pub use idempotent::{Fingerprint, FingerprintFn, Idempotent, KeyStrategy, KeySupplier};
pub use memory::MemoryStore;
pub use pg::{PgSource, PgStore};
#[cfg(feature = "redis")]
pub use redis::RedisStore;
pub use retry::{Attempt, Retry};
pub use store::IdempotencyStore;
pub use toolkit::Toolkit;
pub use types::*;
pub use web::{Action, Params, UpstreamKey, WebExecutor};

/// The HTTP method type of web actions.
pub use reqwest::Method;
