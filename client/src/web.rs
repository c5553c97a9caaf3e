//! The web-service executor: declared HTTP actions whose calls are deduplicated like tools.
//!
//! POST, PUT, PATCH and DELETE change something upstream: they carry `Idempotency-Key`
//! and are deduplicated without settings of their own. By default the key sent is the
//! record's `upstream_key` (`UpstreamKey::Record`): a uuid minted when the call is first
//! claimed and kept across takeovers, so that a provider deduplicates what our store could
//! not (a crash between its side effect and our completion), and unique per (owner, scope,
//! key), so that two actions (or two roles) whose calls share a key never send the provider
//! the same one. `UpstreamKey::CallKey` sends the bare call key instead, an explicit choice
//! with its hazard in its docs. GET, HEAD, OPTIONS and TRACE are reads: they carry no key,
//! and only settings of their own deduplicate them. Any other method (CONNECT, an
//! extension method) is refused by `register` unless the action says whether it changes
//! something (`Action::side_effect`).
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

use crate::error::{Error, Result};

/// Whether an action changes something upstream (and so carries `Idempotency-Key` and is
/// deduplicated without settings of its own): its own word (`Action::side_effect`), else
/// its method's. A method that is neither a read nor one of the four that change
/// something is refused: guessing either way is wrong for some provider.
pub(crate) fn side_effect_of(action: &action::Action) -> Result<bool> {
    if let Some(says) = action.side_effect {
        return Ok(says);
    }
    let m = &action.method;
    if matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    ) {
        Ok(false)
    } else if matches!(
        *m,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    ) {
        Ok(true)
    } else {
        Err(Error::invalid(format!(
            "action {}: the method {m} is neither a read nor a write the executor knows",
            action.name
        ))
        .with_detail("GET, HEAD, OPTIONS and TRACE are reads (no Idempotency-Key, not deduplicated by defaults); POST, PUT, PATCH and DELETE change something (Idempotency-Key, deduplicated). Any other method is not guessed.")
        .with_hint("Say how to treat it: Action::side_effect(true) to treat it as POST, Action::side_effect(false) to treat it as GET."))
    }
}

/// Whether a request of this method has no body (its input travels as a query).
pub(crate) fn bodiless(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}
