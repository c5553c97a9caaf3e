//! The web-service executor: declared HTTP actions whose calls are deduplicated like tools.
//!
//! POST, PUT, PATCH and DELETE carry `Idempotency-Key`: the call's key, the same on every
//! attempt of the call, a takeover after a crash included, so that the provider
//! deduplicates what our store could not (a crash between its side effect and our
//! completion). `UpstreamKey::Record` sends the record's `upstream_key` instead, for
//! providers that cap key length or where the key must not reveal the input. GET, HEAD
//! and OPTIONS carry none, but a remembered result still short-circuits them.
//!
//! Requests go through the caller's `reqwest::Client` where given, with an action's headers
//! and a call's (`Headers`) over its defaults; headers are never stored, nor in the key or
//! fingerprint unless an action names them. `{name}` in an endpoint's path is filled from
//! the input's field `name`, which is then not sent again in the body or query.

mod action;
mod call_fingerprint;
mod endpoint;
mod executor;
mod headers;
mod http_tool;
mod retry_after;

pub use action::{Action, Params, UpstreamKey};
pub use executor::WebExecutor;
pub use headers::Headers;

use reqwest::Method;

/// Whether a method changes something upstream (and so carries `Idempotency-Key`).
pub(crate) fn unsafe_method(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}
