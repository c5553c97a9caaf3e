//! pg-idempotency-mcp: a proxy in front of any MCP server that makes its tool calls safe to
//! retry. A `tools/call` of a tool with an effect is deduplicated in PostgreSQL (over
//! pg_idempotency's SQL API, the extension or the portable variant): a retry with the same
//! arguments or key gets the first call's result instead of a second effect, whichever
//! replica of the proxy it reaches. Everything else passes through. docs/mcp.md is the
//! reference.

pub mod answer;
pub mod auth;
pub mod call;
pub mod config;
mod duration;
pub mod forward_tool;
pub mod front;
mod front_check;
pub mod key;
pub mod limits;
pub mod listener;
pub mod listing;
pub mod malformed;
pub mod malformed_http;
pub mod origin;
pub mod policy;
pub mod principal;
pub mod proxy;
mod reconcile;
pub mod recordings;
pub mod scope;
pub mod session;
pub mod sessions;
pub mod split_store;
pub mod stdio_front;
#[cfg(unix)]
mod stdio_pipes;
pub mod store;
pub mod upstream;
pub mod upstream_child;
pub mod upstream_http;
pub mod waiters;

pub use duration::parse_duration;
