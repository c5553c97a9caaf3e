//! The one tool the proxy registers (under every scope): it sends the call on to the
//! upstream server and says what the server's answer means for the record.
//!
//! - A result is the call's answer: kept (a success, or an `isError` result as a failure
//!   that `cache_failures` decides on).
//! - A JSON-RPC error, an unfinished result (input required, a task), or a cancellation by
//!   the client before the server answered: released, never kept; a retry runs again.
//! - A connection that broke after the call went out: abandoned. The server may have
//!   acted, so the claim is left to lapse, and the attempt that takes it over decides by
//!   the tool's `on_unknown_outcome`.
//! - A result larger than the policy's bound: passed on, and a mark kept (`oversize =
//!   "mark"`: every retry is told the effect happened) or the claim released (`"release"`).
//!
//! Whatever the server answered is handed to the call's first caller at once, through the
//! call's [`FirstAnswer`], before the record is written: the first caller always gets the
//! server's own answer, and does not wait for its recording (recordings.rs).

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use pg_idempotency_client::marks::Mark;
use pg_idempotency_client::{tool_fn_with, CallContext, Tool, ToolError};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ErrorData, GetMeta, RequestMetaObject,
    ServerResult,
};
use rmcp::{Peer, RoleClient};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::answer::code;
use crate::config::Oversize;
use crate::upstream::{cancel_upstream, ProgressMap};

/// The `_meta` member the upstream server is told the call's stable key in: the same on
/// every attempt, a takeover included, for a server that deduplicates on its own.
pub const UPSTREAM_KEY: &str = "pg-idempotency/upstream";

/// What the tool needs of its call, handed over in the call's extensions.
#[derive(Clone)]
pub struct Forwarding {
    pub peer: Peer<RoleClient>,
    pub progress: Arc<ProgressMap>,
    pub name: String,
    pub meta: RequestMetaObject,
    pub cancelled: CancellationToken,
    pub max_result_bytes: usize,
    pub oversize: Oversize,
    pub first: FirstAnswer,
}

/// Where the server's answer goes to the call's first caller, once.
#[derive(Clone)]
pub struct FirstAnswer(Arc<Mutex<Option<oneshot::Sender<Passed>>>>);

#[derive(Debug, Clone)]
pub enum Passed {
    Result(Box<ServerResult>),
    Error(ErrorData),
}

impl FirstAnswer {
    /// The sending end, for the call's forwarding, and the first caller's receiving end:
    /// it ends without an answer if the tool did not run for this call.
    pub fn new() -> (FirstAnswer, oneshot::Receiver<Passed>) {
        let (tx, rx) = oneshot::channel();
        (FirstAnswer(Arc::new(Mutex::new(Some(tx)))), rx)
    }

    fn put(&self, p: Passed) {
        let sender = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(sender) = sender {
            // A first caller no longer listening (its request dropped) changes nothing.
            let _ = sender.send(p);
        }
    }
}

pub fn forward_tool() -> Arc<dyn Tool> {
    tool_fn_with(|input: Value, ctx: CallContext| async move {
        let Some(f) = ctx.extensions.get::<Forwarding>().cloned() else {
            return Err(ToolError::new("a call without its forwarding context").release());
        };
        run(f, input, &ctx).await
    })
}

async fn run(f: Forwarding, input: Value, ctx: &CallContext) -> Result<Value, ToolError> {
    let mut params = CallToolRequestParams::new(f.name.clone());
    params.arguments = input.as_object().cloned();
    let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let mut meta = f.meta.clone();
    let front_token = meta.get_progress_token();
    meta.0.insert(
        UPSTREAM_KEY.into(),
        json!({"key": ctx.key, "upstreamKey": ctx.upstream_key.map(|u| u.to_string()), "attempt": ctx.attempt}),
    );
    *request.get_meta_mut() = meta;
    let handle = match f
        .peer
        .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
        .await
    {
        Ok(handle) => handle,
        // Not sent: the server never saw it.
        Err(e) => return Err(unreachable(&f, e, false)),
    };
    let token = handle.progress_token.clone();
    if let Some(front) = front_token {
        f.progress.insert(token.clone(), front);
    }
    let id = handle.id.clone();
    let answer = tokio::select! {
        biased;
        answer = handle.await_response() => answer,
        _ = f.cancelled.cancelled() => {
            cancel_upstream(&f.peer, id).await;
            f.progress.forget_later(token.clone());
            return Err(ToolError::new("cancelled by the client before the server answered").release());
        }
    };
    f.progress.forget_later(token.clone());
    match answer {
        Ok(ServerResult::CallToolResult(result)) => {
            let value = serde_json::to_value(&result).map_err(ToolError::from)?;
            let size = json_len(&value);
            if size > f.max_result_bytes {
                tracing::warn!(tool = %f.name, size, bound = f.max_result_bytes, oversize = ?f.oversize, "a result larger than the bound is passed on, not kept");
                f.first
                    .put(Passed::Result(Box::new(ServerResult::CallToolResult(
                        result,
                    ))));
                return match f.oversize {
                    Oversize::Mark => Ok(Mark::Unrecorded(format!(
                        "the result was {size} bytes, over the proxy's bound of {} bytes",
                        f.max_result_bytes
                    ))
                    .to_response()),
                    Oversize::Release => {
                        Err(ToolError::new("the result is over the bound").release())
                    }
                };
            }
            let failed = result.is_error == Some(true);
            f.first
                .put(Passed::Result(Box::new(ServerResult::CallToolResult(
                    result,
                ))));
            if failed {
                return Err(
                    ToolError::new(format!("tool {} answered an error result", f.name))
                        .with_response(value),
                );
            }
            Ok(value)
        }
        Ok(other) => {
            // Not the call's end (input required, a task to poll): passed on, not kept.
            f.first.put(Passed::Result(Box::new(other)));
            Err(ToolError::new("an unfinished result").release())
        }
        Err(rmcp::ServiceError::McpError(e)) => {
            f.first.put(Passed::Error(e.clone()));
            Err(ToolError::new(format!("the server answered an error: {}", e.message)).release())
        }
        Err(e) => Err(unreachable(&f, e, true)),
    }
}

/// The length of `value`'s compact JSON text, counted as it is written: the result is not
/// written out once more only to be measured.
fn json_len(value: &Value) -> usize {
    struct Counted(usize);
    impl std::io::Write for Counted {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted(0);
    // Writing a Value into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

/// The server could not be reached: before the call went out, a retry may run it; after,
/// the server may have acted, and the claim is left to lapse.
fn unreachable(f: &Forwarding, e: rmcp::ServiceError, sent: bool) -> ToolError {
    let message = format!("the upstream MCP server cannot be reached: {e}");
    let (code, kind, hint) = if sent {
        (
            code::UPSTREAM_LOST,
            "upstream_lost",
            "The server may have acted. Retry with the same key: the retry waits for the call's lease to lapse, then takes it over under the tool's on_unknown_outcome.",
        )
    } else {
        (
            ErrorData::internal_error("", None).code.0,
            "upstream_unreachable",
            "The call was not sent; retry once the server is back.",
        )
    };
    f.first.put(Passed::Error(ErrorData::new(
        rmcp::model::ErrorCode(code),
        message.clone(),
        Some(json!({"kind": kind, "hint": hint})),
    )));
    let error = ToolError::new(message).retryable();
    if sent {
        error.abandon()
    } else {
        error.release()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counted_length_is_the_written_length() {
        let value = json!({"content": [{"type": "text", "text": "é \"quoted\" \n\u{1F600}"}], "n": 1.5, "e": [], "o": {}});
        assert_eq!(json_len(&value), value.to_string().len());
    }
}
