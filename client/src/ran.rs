//! What a claimed call's tool did, and what is stored for it: the answer the holder
//! (holder.rs) records and hands to every call that waits for it (live_holders.rs).

use serde_json::{json, Value};

use crate::marks::Mark;
use crate::tool::ToolError;

/// What the tool did.
#[derive(Debug, Clone)]
pub(crate) enum Ran {
    Ok(Value),
    Failed(ToolError),
    Panicked(String),
    /// A reconcile read found the earlier attempt's result: the tool did not run.
    Found(Value),
    /// The earlier attempt's outcome is unknown and the tool's choice is to refuse.
    Refused(String),
}

impl Ran {
    /// What is stored for it, and whether it succeeded.
    pub(crate) fn response(&self) -> (Option<Value>, bool) {
        match self {
            Ran::Ok(v) => (Some(v.clone()), true),
            Ran::Failed(e) => (e.response.clone(), false),
            Ran::Panicked(message) => (Some(json!({"error": message})), false),
            Ran::Found(v) => (Some(v.clone()), true),
            // A mark, kept as a success: a remembered failure may be claimed again
            // (`return_cached_if_success`), and a refused call must stay refused.
            Ran::Refused(why) => (Some(Mark::OutcomeUnknown(why.clone()).to_response()), true),
        }
    }
}
