//! A tool's own failure, and how other errors become one so that `?` works in a tool body.
//!
//! `ToolError` is a `std::error::Error`, so it cannot also take `From` every error (the
//! blanket impl would overlap `From<T> for T`; anyhow's reasoning). It takes the common ones
//! here; a typed tool (`typed.rs`) may return any error at all, and gets its `ToolError`
//! back, kind and all, when that is what it returned.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, ErrorKind};

/// A tool's own failure: what to report (and, if its settings cache failures, replay).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// `ToolFailed` unless the tool knows better (a web action reports `Http`).
    pub kind: ErrorKind,
    pub message: String,
    pub response: Option<Value>,
    /// Another attempt may succeed (a timeout upstream, a 503).
    pub retryable: bool,
    /// When the next attempt is worth making, if the tool was told (a provider's
    /// `Retry-After`). `Retry` waits that long instead of its own backoff.
    pub retry_after: Option<Duration>,
    /// What becomes of the call's claim: by default the settings' `cache_failures`
    /// decide; a failure that says nothing of the call's outcome overrides them.
    pub record: FailureRecord,
}

/// What a claimed call's failure does to its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureRecord {
    /// The call's `cache_failures` decide: remembered (replayed to every retry) or
    /// released (a retry runs again).
    #[default]
    Policy,
    /// Released whatever `cache_failures` say: the failure is not the call's answer (the
    /// request never reached whoever acts, or was refused before it acted), so a retry
    /// runs again.
    Release,
    /// Neither remembered nor released: the effect may have happened (the connection to
    /// whoever acts broke after the request went out). The claim is left to lapse, and the
    /// attempt that takes it over decides by `on_unknown_outcome`.
    Abandon,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> ToolError {
        ToolError {
            kind: ErrorKind::ToolFailed,
            message: message.into(),
            response: None,
            retryable: false,
            retry_after: None,
            record: FailureRecord::Policy,
        }
    }

    /// Released whatever the settings' `cache_failures` say ([`FailureRecord::Release`]).
    pub fn release(mut self) -> ToolError {
        self.record = FailureRecord::Release;
        self
    }

    /// Left to lapse, neither remembered nor released ([`FailureRecord::Abandon`]).
    pub fn abandon(mut self) -> ToolError {
        self.record = FailureRecord::Abandon;
        self
    }

    /// What the caller is answered with (and, cached, replayed).
    pub fn with_response(mut self, response: Value) -> ToolError {
        self.response = Some(response);
        self
    }

    /// Another attempt may succeed.
    pub fn retryable(mut self) -> ToolError {
        self.retryable = true;
        self
    }

    /// Any error, as a tool failure: a `ToolError` keeps what it says (kind, response,
    /// retryability), whether it comes as itself, in a box, or in an `anyhow::Error` (the
    /// `anyhow` feature, on by default); an [`Error`] keeps its message, response and
    /// retryability; any other is `ToolFailed` with its message and its sources'.
    pub fn of<E>(e: E) -> ToolError
    where
        E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    {
        // Before boxing, since a box made by anyhow hides the error it holds.
        #[cfg(feature = "anyhow")]
        let e = match exactly::<anyhow::Error, E>(e) {
            Ok(e) => return ToolError::from_anyhow(e),
            Err(e) => e,
        };
        ToolError::from_boxed(e.into())
    }

    fn from_boxed(e: Box<dyn StdError + Send + Sync>) -> ToolError {
        let e = match e.downcast::<ToolError>() {
            Ok(tool_error) => return *tool_error,
            Err(e) => e,
        };
        match e.downcast::<Error>() {
            Ok(error) => ToolError::from(*error),
            Err(e) => ToolError::new(message_with_sources(&*e)),
        }
    }

    #[cfg(feature = "anyhow")]
    fn from_anyhow(e: anyhow::Error) -> ToolError {
        let e = match e.downcast::<ToolError>() {
            Ok(tool_error) => return tool_error,
            Err(e) => e,
        };
        match e.downcast::<Error>() {
            Ok(error) => ToolError::from(error),
            // `{:#}`: each context, then the error under it.
            Err(e) => ToolError::new(format!("{e:#}")),
        }
    }
}

/// `e` as a `T`, if that is its type.
#[cfg(feature = "anyhow")]
fn exactly<T: 'static, E: 'static>(e: E) -> Result<T, E> {
    let mut slot = Some(e);
    let taken = (&mut slot as &mut dyn std::any::Any)
        .downcast_mut::<Option<T>>()
        .and_then(Option::take);
    match (taken, slot) {
        (Some(t), _) => Ok(t),
        (None, Some(e)) => Err(e),
        // The slot is emptied only when it held a T, and then `taken` has it.
        (None, None) => unreachable!("an emptied slot whose value was not taken"),
    }
}

/// "outer: inner: innermost", each source once: a source whose text its outer error already
/// shows is not repeated.
fn message_with_sources(e: &(dyn StdError + 'static)) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = s.source();
    }
    message
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for ToolError {}

impl From<String> for ToolError {
    fn from(message: String) -> ToolError {
        ToolError::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> ToolError {
        ToolError::new(message)
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> ToolError {
        ToolError::new(message_with_sources(&e))
    }
}

/// A serde error in a tool's body is the tool's failure (`ToolFailed`), not the client's
/// `Serialization`, which names a record or an answer the client could not decode.
impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> ToolError {
        ToolError::new(e.to_string())
    }
}

/// A client error met inside a tool (a nested dispatch, a store call; `?` on `dispatch_in`
/// inside a transactional tool) fails this tool: `ToolFailed`, with its message, response
/// and retryability. Its own kind is not kept (a `Mismatch` or `LeaseLost` of the nested
/// call is none of this one), except `Contention`: a serialization failure or deadlock
/// aborts the caller's transaction, which the caller retries whole.
impl From<Error> for ToolError {
    fn from(e: Error) -> ToolError {
        let contention = e.kind == ErrorKind::Contention;
        ToolError {
            kind: if contention {
                ErrorKind::Contention
            } else {
                ErrorKind::ToolFailed
            },
            message: e.to_string(),
            response: e.response().cloned(),
            retryable: e.retryable() || contention,
            retry_after: e.retry_after(),
            record: FailureRecord::Policy,
        }
    }
}

impl From<Box<dyn StdError + Send + Sync>> for ToolError {
    fn from(e: Box<dyn StdError + Send + Sync>) -> ToolError {
        ToolError::of(e)
    }
}
