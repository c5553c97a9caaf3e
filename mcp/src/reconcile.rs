//! `on_unknown_outcome = { reconcile = { tool = "...", ... } }`: before a call taken over
//! from an attempt that may have acted runs again, a read tool of the same server is asked
//! whether the effect happened. Found: its result is the call's answer, and nothing runs.
//! Not found: the call runs. No answer a boolean can be read from: the call is refused.

use pg_idempotency_client::{Reconcile, Reconciled, ToolError};
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::{Peer, RoleClient};
use serde_json::{Map, Value};

use crate::config::ReconcileRead;

pub async fn read(
    peer: Peer<RoleClient>,
    rule: ReconcileRead,
    call: Reconcile,
) -> Result<Reconciled, ToolError> {
    let mut arguments = Map::new();
    for (name, source) in &rule.arguments {
        let value = if source == "$key" {
            Value::String(call.key.clone())
        } else {
            call.input.pointer(source).cloned().unwrap_or(Value::Null)
        };
        arguments.insert(name.clone(), value);
    }
    let mut params = CallToolRequestParams::new(rule.tool.clone());
    params.arguments = Some(arguments);
    let answer = peer
        .send_request(ClientRequest::CallToolRequest(CallToolRequest::new(params)))
        .await
        .map_err(|e| ToolError::new(format!("the reconcile read {} failed: {e}", rule.tool)))?;
    let ServerResult::CallToolResult(result) = answer else {
        return Ok(Reconciled::Unknown);
    };
    if result.is_error == Some(true) {
        return Ok(Reconciled::Unknown);
    }
    // Its structured result, or the JSON of its first text block.
    let structured = result.structured_content.clone().or_else(|| {
        result
            .content
            .iter()
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .and_then(|t| serde_json::from_str(&t).ok())
    });
    let pointer = rule.found.as_deref().unwrap_or("/found");
    match structured.as_ref().and_then(|s| s.pointer(pointer)) {
        Some(Value::Bool(true)) => Ok(Reconciled::Found(
            serde_json::to_value(&result).map_err(ToolError::from)?,
        )),
        Some(Value::Bool(false)) => Ok(Reconciled::NotFound),
        _ => Ok(Reconciled::Unknown),
    }
}
