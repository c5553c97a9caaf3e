//! An HTTP upstream is told each deduplicated call's upstream key in the `Idempotency-Key`
//! header of the POST that carries it, as well as in `_meta` (forward_tool.rs): the record's
//! uuid, the same on every attempt, a takeover by another replica included. A server (or a
//! gateway in front of it) that deduplicates on that header makes `rerun` safe.
//!
//! rmcp's Streamable HTTP client sends the same headers with every request of a transport;
//! this client wraps reqwest's and adds the header to the one request that carries a
//! `tools/call` with the proxy's `_meta` member. Everything else goes as rmcp sends it.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcMessage};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use crate::forward_tool::UPSTREAM_KEY;

/// The header a call's upstream key is sent in.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// reqwest's client, as rmcp builds it, adding `Idempotency-Key` to the POST of a call.
#[derive(Clone)]
pub struct KeyedClient(reqwest013::Client);

impl KeyedClient {
    /// Only same-origin 307 and 308 redirects followed, at most 10 (any other would lose the
    /// POST's body or carry the session and the key to another host). Unlike rmcp's default
    /// client, idle connections are kept, with TCP_NODELAY: a connection per call cost each
    /// call a TCP handshake and the server's accept. (rmcp keeps none because a reused
    /// connection stalled on a delayed ACK; with TCP_NODELAY no write waits for one.)
    pub fn new() -> reqwest013::Result<KeyedClient> {
        reqwest013::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(IDLE_KEPT)
            .redirect(same_origin_redirects())
            .build()
            .map(KeyedClient)
    }
}

/// How long an idle connection to the upstream server is kept for the next call.
const IDLE_KEPT: std::time::Duration = std::time::Duration::from_secs(30);

fn same_origin_redirects() -> reqwest013::redirect::Policy {
    reqwest013::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest013::StatusCode::TEMPORARY_REDIRECT | reqwest013::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else {
            attempt.follow()
        }
    })
}

/// The upstream key of a `tools/call` the proxy forwards, if `message` is one.
fn upstream_key(message: &ClientJsonRpcMessage) -> Option<HeaderValue> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    if !matches!(request.request, ClientRequest::CallToolRequest(_)) {
        return None;
    }
    let meta = request.request.get_meta();
    let key = meta.0.get(UPSTREAM_KEY)?.get("upstreamKey")?;
    HeaderValue::from_str(key.as_str()?).ok()
}

fn with_key(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if let Some(key) = upstream_key(message) {
        headers.insert(IDEMPOTENCY_KEY, key);
    }
    headers
}

impl StreamableHttpClient for KeyedClient {
    type Error = reqwest013::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_key(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_key(&message, custom_headers);
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let headers = with_key(&message, custom_headers);
        self.0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}
