//! The HTTP front's reading of a POST body before rmcp sees it (mcp/src/malformed.rs says
//! what is refused, and how). rmcp answers a body that is not a JSON-RPC message with
//! `415` and plain text; here it is answered as the MCP specification's Streamable HTTP
//! transport says: an HTTP error status (400) with a JSON-RPC error response that has no
//! `id`. A Content-Type other than JSON is answered `415` with a JSON-RPC error too, and a
//! body over the bound `413` (docs/decisions.md says why).
//!
//! And a `DELETE` that ended a session is answered `200`, not rmcp's `202`: the official
//! Python SDK takes only `200` or `204` as a session ended, and warns otherwise.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use crate::malformed::{self, Read, Refusal};

/// Checks a POST's body (at most `max_body` bytes are read) and a DELETE's answer.
pub async fn check(State(max_body): State<usize>, request: Request, next: Next) -> Response {
    if request.method() == Method::DELETE {
        return ended(next.run(request).await);
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    if !is_json(request.headers()) {
        return answer(unsupported_media_type(request.headers()));
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > 2 * max_body as u64) {
        // Not worth reading even to drop it: the connection is closed after the answer.
        let mut refused = answer(too_large(max_body));
        refused
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return refused;
    }
    let (parts, body) = request.into_parts();
    let bytes = match bounded(body, max_body).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => return answer(too_large(max_body)),
        Err(Unread::Broken(e)) => {
            tracing::debug!(error = %e, "a request body could not be read");
            return answer(malformed::parse_error(
                "The body could not be read to its end.".into(),
            ));
        }
    };
    match malformed::read(&bytes) {
        Read::Message(_) => {
            // rmcp reads the body again, without a byte order mark (which it does not skip).
            let body = bytes
                .strip_prefix(b"\xEF\xBB\xBF".as_slice())
                .map(|rest| bytes.slice_ref(rest))
                .unwrap_or(bytes);
            next.run(Request::from_parts(parts, Body::from(body))).await
        }
        Read::Dropped(why) => {
            // A notification is never answered: the POST is accepted, as any notification's.
            tracing::info!("dropped {why}");
            StatusCode::ACCEPTED.into_response()
        }
        Read::Refused(refusal) => {
            tracing::info!(code = refusal.code.0, kind = refusal.kind, detail = %refusal.detail, "a malformed request answered");
            answer(refusal)
        }
    }
}

/// A Content-Type of `application/json`, parameters aside (what rmcp accepts).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn unsupported_media_type(headers: &HeaderMap) -> Refusal {
    let given = match headers.get(header::CONTENT_TYPE) {
        None => "The request has no Content-Type.".to_string(),
        Some(v) => match v.to_str() {
            Ok(t) if t.len() <= 100 => format!("The Content-Type is {t:?}, not application/json."),
            _ => "The Content-Type is not application/json.".to_string(),
        },
    };
    malformed::invalid_request(
        "unsupported_media_type",
        given,
        "Send each JSON-RPC message as the body of a POST with Content-Type: application/json (MCP's Streamable HTTP transport).",
    )
    .with_status(StatusCode::UNSUPPORTED_MEDIA_TYPE)
}

fn too_large(max_body: usize) -> Refusal {
    malformed::too_large("body", max_body).with_status(StatusCode::PAYLOAD_TOO_LARGE)
}

fn answer(refusal: Refusal) -> Response {
    (
        refusal.status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        refusal.answer().to_string(),
    )
        .into_response()
}

enum Unread {
    TooLarge,
    Broken(axum::Error),
}

/// The body, read frame by frame; past `max` bytes it is no longer kept. The rest is
/// still read and dropped, up to `max` bytes more, so that the caller, still sending,
/// reads the answer: a connection closed with bytes unread is reset, and a reset can
/// discard the answer before the caller reads it.
async fn bounded(mut body: Body, max: usize) -> Result<Bytes, Unread> {
    let mut collected = Vec::new();
    let mut dropped = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Unread::Broken)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if dropped == 0 && collected.len() + data.len() <= max {
            collected.extend_from_slice(&data);
            continue;
        }
        dropped += data.len();
        collected = Vec::new();
        if dropped > max {
            break;
        }
    }
    if dropped > 0 {
        return Err(Unread::TooLarge);
    }
    Ok(Bytes::from(collected))
}

/// rmcp answers a session ended by `DELETE` with `202 Accepted`; the session is ended by
/// then, so the answer is `200 OK`, which every official SDK takes as such.
fn ended(response: Response) -> Response {
    if response.status() != StatusCode::ACCEPTED {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.status = StatusCode::OK;
    Response::from_parts(parts, body)
}
