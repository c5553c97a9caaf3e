//! One HTTP action as a tool: sends the call, with its key on methods that change something.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use reqwest::header::HeaderValue;
use reqwest::StatusCode;
use serde_json::Value;

use super::action::{Action, Params, UpstreamKey};
use super::bodiless;
use super::endpoint::{kind_of, Endpoint};
use super::headers::Headers;
use super::retry_after;
use crate::error::{Error, ErrorKind, Result};
use crate::tool::{CallContext, FailureRecord, Tool, ToolError};

/// The executor's HTTP client, shared with its actions, so that one given after they were
/// registered (`WebExecutor::with_http_client`) is the one they use.
pub(crate) type SharedClient = Arc<RwLock<reqwest::Client>>;

pub(crate) struct HttpTool {
    pub(crate) http: SharedClient,
    pub(crate) action: Action,
    pub(crate) endpoint: Endpoint,
    /// Whether it changes something upstream (`super::side_effect_of`): its requests then
    /// carry `Idempotency-Key`.
    pub(crate) side_effect: bool,
}

impl HttpTool {
    /// Whether the input travels as query parameters: always on a method without a body.
    fn in_query(&self) -> bool {
        !matches!(self.action.params, Params::Body) || bodiless(&self.action.method)
    }
}

#[async_trait]
impl Tool for HttpTool {
    /// Query parameters are names with values: an input sent as a query must be an object
    /// (or null, for none). Anything else would be dropped without a word.
    /// Path parameters need a string or a number in the input's field of their name.
    fn check(&self, input: &Value) -> Result<()> {
        self.endpoint.check(&self.action.name, input)?;
        if !self.in_query() || input.is_object() || input.is_null() {
            return Ok(());
        }
        let kind = kind_of(input);
        Err(Error::invalid(format!(
            "action {} sends its input as query parameters, which needs an object",
            self.action.name
        ))
        .with_detail(format!("The input is {kind}."))
        .with_hint("Pass an object whose members name the parameters (nested values are sent as JSON text), or null for none."))
    }

    fn failure_kind(&self) -> ErrorKind {
        ErrorKind::Http
    }

    async fn call(&self, input: Value) -> std::result::Result<Value, ToolError> {
        self.call_with(input, CallContext::default()).await
    }

    async fn call_with(
        &self,
        input: Value,
        ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        let a = &self.action;
        // check() refused, before the claim, every input the endpoint cannot take.
        let (url, input) = self.endpoint.fill(input).map_err(|why| ToolError {
            kind: ErrorKind::InvalidArgument,
            message: format!("action {}: {why}", a.name),
            response: None,
            retryable: false,
            retry_after: None,
            record: FailureRecord::Policy,
        })?;
        let http = self.http.read().unwrap_or_else(|p| p.into_inner()).clone();
        // The call's headers over the action's; both over the client's defaults, which
        // reqwest adds for the names a request leaves unset.
        let headers = match ctx.extensions.get::<Headers>() {
            Some(call) => call.over(a.headers.map()),
            None => a.headers.map().clone(),
        };
        let mut req = http.request(a.method.clone(), &url).headers(headers);
        req = if self.in_query() {
            // check() let only an object or null through.
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
        } else {
            req.json(&input)
        };
        let mut keyed = false;
        // Whether the key sent is the record's uuid, which a release would lose: the next
        // claim mints another.
        let mut record_keyed = false;
        if self.side_effect {
            let key = match a.upstream_key {
                UpstreamKey::CallKey => ctx.key,
                UpstreamKey::Record => match ctx.upstream_key {
                    Some(u) => {
                        record_keyed = true;
                        Some(u.to_string())
                    }
                    None => ctx.key,
                },
            };
            if let Some(key) = key {
                req = req.header("Idempotency-Key", header_value(&a.name, &key)?);
                keyed = true;
            }
        }
        let resp = req.send().await.map_err(|e| {
            let failed = ToolError {
                kind: ErrorKind::Http,
                message: e.to_string(),
                response: None,
                // A request that could not even be built (a malformed endpoint) fails the
                // same way every time.
                retryable: !e.is_builder(),
                retry_after: None,
                record: FailureRecord::Policy,
            };
            // Sent, and no answer (a timeout, a connection broken mid-way): the provider
            // may have acted under the record's key. Releasing would give the retry a new
            // key; left to lapse, the takeover keeps it (on_unknown_outcome decides).
            if record_keyed && !e.is_connect() && !e.is_builder() {
                failed.abandon()
            } else {
                failed
            }
        })?;
        let status = resp.status();
        let advice = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after::parse(v, std::time::SystemTime::now()));
        let text = resp.text().await.map_err(|e| ToolError {
            kind: ErrorKind::Http,
            message: e.to_string(),
            response: None,
            retryable: true,
            retry_after: None,
            record: FailureRecord::Policy,
        })?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            Ok(body)
        } else {
            let retryable = worth_retrying(status, keyed);
            let failed = ToolError {
                kind: ErrorKind::Http,
                message: format!("{} {url} answered {status}", a.method),
                response: Some(serde_json::json!({"status": status.as_u16(), "body": body})),
                retryable,
                // Advice on when to come back matters only to an answer worth retrying.
                retry_after: advice.filter(|_| retryable),
                record: FailureRecord::Policy,
            };
            // A 409 to the record's key: the provider still runs an earlier request with
            // it, whose effect is under way. Released, the retry would send a new key and
            // run the effect a second time; left to lapse, the takeover sends the same
            // one, and the provider replays once it is done.
            if record_keyed && status == StatusCode::CONFLICT {
                Err(failed.abandon())
            } else {
                Err(failed)
            }
        }
    }
}

/// Whether another attempt of the same call may get another answer. A server error or a
/// rate limit may pass; so may a 409 to a request that carried `Idempotency-Key`: the
/// provider is still running an earlier request with that key (the Idempotency-Key draft's
/// answer, and Stripe's), typically the attempt a takeover replaced, and will replay its
/// result once it is done. Any other client error will not pass.
fn worth_retrying(status: StatusCode, keyed: bool) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || (keyed && status == StatusCode::CONFLICT)
}

/// The key as an `Idempotency-Key` value, or a refusal when HTTP cannot carry it as it is:
/// a control character (CR or LF would end the header; the others are refused by HTTP
/// libraries), or a space or tab at either end, which receivers strip, so that " o-1" and
/// "o-1" would be one key upstream. Such a key is refused before anything is sent, and not
/// worth retrying.
fn header_value(action: &str, key: &str) -> std::result::Result<HeaderValue, ToolError> {
    let fits = !key.starts_with([' ', '\t'])
        && !key.ends_with([' ', '\t'])
        && !key.chars().any(|c| c.is_ascii_control());
    let refused = || {
        ToolError {
        kind: ErrorKind::InvalidArgument,
        message: format!(
            "action {action}: the key {key:?} cannot be sent as Idempotency-Key (a control character, or a space at either end); use UpstreamKey::Record to send the record's uuid instead"
        ),
        response: None,
        retryable: false,
        retry_after: None,
        record: FailureRecord::Policy,
    }
    };
    if !fits {
        return Err(refused());
    }
    HeaderValue::from_bytes(key.as_bytes()).map_err(|_| refused())
}
