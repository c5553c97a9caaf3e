//! One HTTP action as a tool: sends the call, with its key on methods that change something.

use async_trait::async_trait;
use serde_json::Value;

use super::action::{Action, Params, UpstreamKey};
use super::unsafe_method;
use crate::dispatcher::{CallContext, Tool, ToolError};
use crate::error::ErrorKind;

pub(crate) struct HttpTool {
    pub(crate) http: reqwest::Client,
    pub(crate) action: Action,
}

#[async_trait]
impl Tool for HttpTool {
    async fn call(&self, input: Value) -> std::result::Result<Value, ToolError> {
        self.call_with(input, CallContext::default()).await
    }

    async fn call_with(
        &self,
        input: Value,
        ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        let a = &self.action;
        let mut req = self.http.request(a.method.clone(), &a.endpoint);
        req = match a.params {
            Params::Body if unsafe_method(&a.method) => req.json(&input),
            _ => {
                let pairs: Vec<(String, String)> = input
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| {
                                (
                                    k.clone(),
                                    v.as_str().map_or_else(|| v.to_string(), str::to_string),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                req.query(&pairs)
            }
        };
        if unsafe_method(&a.method) {
            let key = match a.upstream_key {
                UpstreamKey::CallKey => ctx.key,
                UpstreamKey::Record => ctx.upstream_key.map(|u| u.to_string()).or(ctx.key),
            };
            if let Some(key) = key {
                req = req.header("Idempotency-Key", key);
            }
        }
        let resp = req.send().await.map_err(|e| ToolError {
            kind: ErrorKind::Http,
            message: e.to_string(),
            response: None,
            retryable: true,
        })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| ToolError {
            kind: ErrorKind::Http,
            message: e.to_string(),
            response: None,
            retryable: true,
        })?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            Ok(body)
        } else {
            // A server error may pass; a client error will not.
            Err(ToolError {
                kind: ErrorKind::Http,
                message: format!("{} {} answered {status}", a.method, a.endpoint),
                response: Some(serde_json::json!({"status": status.as_u16(), "body": body})),
                retryable: status.is_server_error() || status.as_u16() == 429,
            })
        }
    }
}
