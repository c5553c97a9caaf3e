//! A tool call from the caller's side: what a call brings of its own ([`Call`]) and what it
//! is answered ([`Dispatched`], or the tool's failure as an [`Error`]). The dispatcher, the
//! web executor and exactly-once tools all speak it, so it lives apart from any of them.

use std::time::Duration;

use serde_json::Value;

use crate::error::Error;
use crate::idempotent::Idempotent;
use crate::retry::Attempt;
use crate::tool::ToolError;

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

/// A call's own part: settings over the tool's, and what only this call carries.
#[derive(Debug, Clone, Default)]
pub struct Call {
    /// Over the tool's settings, field by field (a longer `wait` or `timeout`, say). An
    /// unset strategy does not turn deduplication on for a tool without settings; a
    /// strategy named here does.
    pub idempotent: Option<Idempotent>,
    /// Handed to the tool in `CallContext::extensions` (a web action reads its per-call
    /// headers there). Never stored, never part of the key or fingerprint.
    pub extensions: http::Extensions,
}

impl Call {
    pub fn new() -> Call {
        Call::default()
    }
    pub fn idempotent(mut self, idempotent: Idempotent) -> Call {
        self.idempotent = Some(idempotent);
        self
    }
    /// Adds a value for the tool to find in its context (one per type).
    pub fn extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Call {
        self.extensions.insert(value);
        self
    }
}

/// A tool's own failure as its caller sees it: the same kind, message, response and advice.
pub(crate) fn tool_failed(e: ToolError) -> Error {
    Error::new(e.kind, e.message)
        .with_response(e.response)
        .with_retryable(e.retryable)
        .with_retry_after(e.retry_after)
}
