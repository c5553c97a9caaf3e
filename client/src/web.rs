//! The web-service executor: declared HTTP actions whose calls are deduplicated like tools.
//!
//! POST, PUT, PATCH and DELETE carry `Idempotency-Key`: the call's key, the same on every
//! attempt of the call, a takeover after a crash included, so that the provider
//! deduplicates what our store could not (a crash between its side effect and our
//! completion). `UpstreamKey::Record` sends the record's `upstream_key` instead, for
//! providers that cap key length or where the key must not reveal the input. GET, HEAD
//! and OPTIONS carry none, but a remembered result still short-circuits them.

use std::sync::Arc;

use async_trait::async_trait;
use reqwest::Method;
use serde_json::Value;

use crate::dispatcher::{
    CallContext, Dispatched, Dispatcher, IdempotencyHint, Tool, ToolError, ToolSpec,
};
use crate::error::{ErrorKind, Result};
use crate::idempotent::Idempotent;
use crate::store::IdempotencyStore;

/// Where an action puts its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Params {
    /// As a JSON body.
    Body,
    /// As query parameters (each top-level field of an object input).
    Query,
}

/// Which key goes upstream as `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKey {
    /// The call's own key.
    CallKey,
    /// The record's upstream key: a uuid, the same across takeovers.
    Record,
}

/// A declared HTTP action.
#[derive(Debug, Clone)]
pub struct Action {
    pub name: String,
    pub method: Method,
    pub endpoint: String,
    pub params: Params,
    pub idempotent: Option<Idempotent>,
    pub upstream_key: UpstreamKey,
    /// None: Required for POST, PUT, PATCH and DELETE, best effort for the others.
    pub hint: Option<IdempotencyHint>,
}

impl Action {
    pub fn new(name: impl Into<String>, method: Method, endpoint: impl Into<String>) -> Action {
        Action {
            name: name.into(),
            method,
            endpoint: endpoint.into(),
            params: Params::Body,
            idempotent: None,
            upstream_key: UpstreamKey::CallKey,
            hint: None,
        }
    }
    pub fn params(mut self, params: Params) -> Action {
        self.params = params;
        self
    }
    pub fn idempotent(mut self, idempotent: Idempotent) -> Action {
        self.idempotent = Some(idempotent);
        self
    }
    pub fn upstream_key(mut self, which: UpstreamKey) -> Action {
        self.upstream_key = which;
        self
    }
    /// A POST under `KeyStrategy::Uuid` (a fresh key per call, deduplicated by the provider
    /// only) must say it does not require deduplication here: `IdempotencyHint::BestEffort`.
    pub fn hint(mut self, hint: IdempotencyHint) -> Action {
        self.hint = Some(hint);
        self
    }
}

/// Whether a method changes something upstream (and so carries `Idempotency-Key`).
fn unsafe_method(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

struct HttpTool {
    http: reqwest::Client,
    action: Action,
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

/// Runs declared HTTP actions through an idempotency store.
pub struct WebExecutor {
    dispatcher: Dispatcher,
    http: reqwest::Client,
}

impl WebExecutor {
    pub fn new(store: Arc<dyn IdempotencyStore>) -> WebExecutor {
        WebExecutor {
            dispatcher: Dispatcher::new(store),
            http: reqwest::Client::new(),
        }
    }

    pub fn with_defaults(mut self, idem: Idempotent) -> WebExecutor {
        self.dispatcher = self.dispatcher.with_defaults(idem);
        self
    }

    pub fn register(&self, action: Action) -> Result<()> {
        let side_effect = unsafe_method(&action.method);
        let mut spec = ToolSpec::new(
            action.name.clone(),
            Arc::new(HttpTool {
                http: self.http.clone(),
                action: action.clone(),
            }),
        )
        .side_effect(side_effect)
        .hint(action.hint.unwrap_or(if side_effect {
            IdempotencyHint::Required
        } else {
            IdempotencyHint::BestEffort
        }));
        if let Some(p) = action.idempotent {
            spec = spec.idempotent(p);
        }
        self.dispatcher.register(spec)
    }

    pub async fn execute(&self, name: &str, input: Value) -> Result<Dispatched> {
        self.dispatcher.dispatch(name, input).await
    }
}
