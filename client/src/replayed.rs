//! What a remembered answer means to the caller: the result, the tool's failure, or the
//! client's mark in their place. Shared by the [`Dispatcher`](crate::Dispatcher) and
//! [`ExactlyOnce`](crate::ExactlyOnce), which may answer for the same scope.

use serde_json::Value;

use crate::call::Dispatched;
use crate::error::{Error, ErrorKind, Result};
use crate::marks::Mark;
use crate::types::Replay;

/// The answer to a call of tool `name` that replays `r`; a remembered failure comes back
/// with the tool's `failure_kind`.
pub(crate) fn replayed(name: &str, failure_kind: ErrorKind, r: Replay) -> Result<Dispatched> {
    match Mark::of(r.response.as_ref()) {
        Some(Mark::Unrecorded(why)) => Err(Error::new(
            ErrorKind::Unrecorded,
            format!("tool {name} ran before, but its result could not be recorded"),
        )
        .with_detail(why)
        .with_hint("The effect happened: look its result up where the tool acted. Forget the record (idem_forget) to let the call run again.")
        .with_replayed()),
        Some(Mark::OutcomeUnknown(why)) => Err(outcome_unknown(name, why).with_replayed()),
        None if r.succeeded => Ok(Dispatched::Replayed(r.response.unwrap_or(Value::Null))),
        None => Err(Error::new(failure_kind, format!("tool {name} failed (remembered)"))
            .with_response(r.response)
            .with_replayed()),
    }
}

/// A call refused because an earlier attempt may have performed its effect.
pub(crate) fn outcome_unknown(name: &str, why: String) -> Error {
    Error::new(
        ErrorKind::OutcomeUnknown,
        format!("the outcome of an earlier attempt of tool {name} is unknown"),
    )
    .with_detail(why)
    .with_hint("Find out whether the effect happened (the record's upstream key names the call upstream), then forget the record (idem_forget) to let the call run again.")
}
