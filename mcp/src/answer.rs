//! What the MCP client is answered: a `CallToolResult` as the upstream gave it (with a
//! `_meta` mark saying whether it ran now or is a replay), or a JSON-RPC error of the
//! proxy's own, with a stable code and `data` that says what to do.

use std::time::Duration;

use rmcp::model::{CallToolResult, ErrorCode, ErrorData};
use serde_json::{json, Map, Value};

/// The `_meta` member every deduplicated call's result carries.
pub const MARK: &str = "pg-idempotency/call";

/// The proxy's JSON-RPC error codes (docs/mcp.md lists them).
pub mod code {
    /// Another attempt of the call is running: retry after `data.retryAfterMs`.
    pub const IN_PROGRESS: i32 = -32071;
    /// The key was used before with other arguments.
    pub const KEY_REUSED: i32 = -32072;
    /// An earlier attempt may have acted, and the policy refuses to run it again.
    pub const OUTCOME_UNKNOWN: i32 = -32073;
    /// The call ran, but its result could not be recorded.
    pub const UNRECORDED: i32 = -32074;
    /// The records cannot be reached: the call was not sent upstream.
    pub const STORE_UNAVAILABLE: i32 = -32075;
    /// The connection to the upstream server broke after the call was sent: its outcome
    /// is unknown until the claim lapses and a retry takes it over.
    pub const UPSTREAM_LOST: i32 = -32076;
    /// A remembered failure under `on_cache_hit = "fail_fast"`.
    pub const FAILED_BEFORE: i32 = -32077;
}

/// How a deduplicated call was answered, for the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Ran,
    Replayed,
}

pub struct Marked<'a> {
    pub scope: &'a str,
    pub key: Option<&'a str>,
    pub how: How,
}

/// The result with the mark in its `_meta` (other members of `_meta` are kept).
pub fn marked(mut result: CallToolResult, m: Marked<'_>) -> CallToolResult {
    let mut mark = Map::new();
    mark.insert("replayed".into(), Value::Bool(m.how == How::Replayed));
    mark.insert("scope".into(), Value::String(m.scope.to_string()));
    if let Some(key) = m.key {
        mark.insert("key".into(), Value::String(key.to_string()));
    }
    let mut meta = result.meta.take().unwrap_or_default();
    meta.0.insert(MARK.into(), Value::Object(mark));
    result.meta = Some(meta);
    result
}

/// A stored result back as a `CallToolResult`.
pub fn result_of(stored: &Value) -> Result<CallToolResult, ErrorData> {
    serde_json::from_value(stored.clone()).map_err(|e| {
        ErrorData::internal_error(
            format!("a stored result is not a CallToolResult: {e}"),
            Some(json!({"kind": "stored_result_unreadable", "hint": "Forget the record (idem_forget) so that the call runs again."})),
        )
    })
}

pub struct ProxyError<'a> {
    pub code: i32,
    pub kind: &'a str,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    pub retry_after: Option<Duration>,
    pub scope: Option<&'a str>,
    pub key: Option<&'a str>,
}

impl ProxyError<'_> {
    pub fn into_error(self) -> ErrorData {
        let mut data = Map::new();
        data.insert("kind".into(), Value::String(self.kind.into()));
        if let Some(d) = self.detail {
            data.insert("detail".into(), Value::String(d));
        }
        if let Some(h) = self.hint {
            data.insert("hint".into(), Value::String(h));
        }
        if let Some(r) = self.retry_after {
            data.insert("retryAfterMs".into(), json!(r.as_millis() as u64));
        }
        if let Some(s) = self.scope {
            data.insert("scope".into(), Value::String(s.into()));
        }
        if let Some(k) = self.key {
            data.insert("key".into(), Value::String(k.into()));
        }
        ErrorData::new(
            ErrorCode(self.code),
            self.message,
            Some(Value::Object(data)),
        )
    }
}

pub fn invalid_params(message: String, hint: String) -> ErrorData {
    ErrorData::invalid_params(message, Some(json!({"kind": "invalid_key", "hint": hint})))
}
