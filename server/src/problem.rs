//! The answers the layer gives itself, as RFC 9457 problem details
//! (`application/problem+json`), one constructor per situation so that every service
//! using the layer says the same thing the same way.

use crate::key::KeyError;
use crate::stored::StoredResponse;
use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, StatusCode};
use serde::Serialize;
use std::time::Duration;

/// Where the problem types live; `type` is this plus the problem's `kind`.
pub const TYPE_BASE: &str = "https://pg-idempotency.dev/problems/";

/// The media type of every problem body.
pub const CONTENT_TYPE_PROBLEM: &str = "application/problem+json";

const KEY_HINT: &str = "send an Idempotency-Key header with a unique value per operation \
                        (for example a UUID) and repeat it, unchanged, on every retry";

/// One problem the layer answers. `kind` names it in `type` and in logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: StatusCode,
    pub title: String,
    pub detail: String,
    pub hint: Option<String>,
    /// When to retry; sent as `Retry-After` in whole seconds, rounded up, at least 1.
    pub retry_after: Option<Duration>,
    pub kind: &'static str,
}

/// The body's members, in RFC 9457's order (`hint` is an extension member).
#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    type_: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'a str>,
}

impl Problem {
    fn new(status: StatusCode, kind: &'static str, title: &str, detail: String) -> Problem {
        Problem {
            status,
            title: title.to_string(),
            detail,
            hint: None,
            retry_after: None,
            kind,
        }
    }

    fn with_hint(mut self, hint: impl Into<String>) -> Problem {
        self.hint = Some(hint.into());
        self
    }

    fn with_retry_after(mut self, retry_after: Duration) -> Problem {
        self.retry_after = Some(retry_after);
        self
    }

    /// The route requires `Idempotency-Key` and the request has none. 400.
    pub fn missing_key(route: &str) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "missing-idempotency-key",
            "Idempotency-Key is required",
            format!("{route} requires an Idempotency-Key header and the request has none"),
        )
        .with_hint(KEY_HINT)
    }

    /// The `Idempotency-Key` header cannot be read as a key. 400.
    pub fn bad_key(error: KeyError) -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-idempotency-key",
            "Idempotency-Key is not valid",
            error.detail(),
        )
        .with_hint(error.hint())
    }

    /// The service's scope function found no principal (account, tenant, API key) for the
    /// request: keys are never shared anonymously. 401.
    pub fn no_principal() -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "no-principal",
            "The caller is not identified",
            "a request with an Idempotency-Key must say who is calling, so that its key \
             cannot collide with another caller's"
                .to_string(),
        )
        .with_hint("send the credentials this service expects (an API key or a bearer token)")
    }

    /// The request body is larger than the layer buffers to fingerprint it. 413.
    pub fn body_too_large(cap: usize) -> Problem {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
            format!("the request body is larger than the {cap} bytes this service accepts"),
        )
        .with_hint(format!("send a body of at most {cap} bytes"))
    }

    /// The key was first used for a different request (method, route, path, query, content
    /// type or body). `status` is the service's choice: 422 by default, 409 or 400.
    pub fn mismatch(status: StatusCode) -> Problem {
        Problem::new(
            status,
            "idempotency-key-mismatch",
            "Idempotency-Key reused for a different request",
            "this Idempotency-Key was first sent with a different request (method, path, \
             query, content type or body); a key names one operation"
                .to_string(),
        )
        .with_hint(
            "repeat the first request exactly to get its result, or use a new key for a new \
             operation",
        )
    }

    /// The first request with this key is still running. 409 + `Retry-After`.
    pub fn in_progress(retry_after: Duration) -> Problem {
        Problem::new(
            StatusCode::CONFLICT,
            "request-in-progress",
            "A request with this Idempotency-Key is in progress",
            "the first request with this Idempotency-Key has not finished yet".to_string(),
        )
        .with_hint("retry after the time in Retry-After, with the same key and request")
        .with_retry_after(retry_after)
    }

    /// The idempotency store cannot be reached, and the service fails closed rather than
    /// risk running the request twice. 503 + `Retry-After`.
    pub fn store_unavailable(retry_after: Duration) -> Problem {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "idempotency-store-unavailable",
            "Idempotency store unavailable",
            "the service cannot check this Idempotency-Key now, so the request was not run"
                .to_string(),
        )
        .with_hint("retry after the time in Retry-After, with the same key and request")
        .with_retry_after(retry_after)
    }

    /// The store refused the key or scope (for example too long for its limits). 400.
    /// The store's own words (its limits, its settings' names) go to the operator's log,
    /// not here.
    pub fn key_refused() -> Problem {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "idempotency-key-refused",
            "Idempotency-Key refused",
            "the service's idempotency store does not accept this Idempotency-Key (for \
             example, it is longer than the store allows); the request was not run"
                .to_string(),
        )
        .with_hint(
            "send a shorter key, such as a UUID, and repeat it unchanged on every retry of \
             the same operation",
        )
    }

    /// The problem as a response to send (and, where the layer caches it, to store).
    pub fn into_stored(self) -> StoredResponse {
        let body = Body {
            type_: format!("{TYPE_BASE}{}", self.kind),
            title: &self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
            hint: self.hint.as_deref(),
        };
        let body = serde_json::to_vec(&body).expect("a problem body always serializes");
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_PROBLEM));
        if let Some(retry_after) = self.retry_after {
            headers.insert(
                RETRY_AFTER,
                HeaderValue::from(retry_after_seconds(retry_after)),
            );
        }
        StoredResponse {
            status: self.status,
            headers,
            body: Bytes::from(body),
        }
    }

    /// The problem as a first answer (not a replay).
    pub fn into_response(self) -> http::Response<Bytes> {
        self.into_stored().into_response()
    }
}

/// `Retry-After` is whole seconds: round up (a client told 0 would retry at once and find
/// the call still running) and never below 1.
pub fn retry_after_seconds(retry_after: Duration) -> u64 {
    let whole = retry_after.as_secs();
    let rounded = if retry_after.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    };
    rounded.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn body(problem: &Problem) -> Value {
        serde_json::from_slice(&problem.clone().into_stored().body).unwrap()
    }

    fn retry_after_header(problem: Problem) -> Option<String> {
        problem
            .into_stored()
            .headers
            .get(RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn body_is_rfc_9457_with_the_hint_as_extension() {
        let problem = Problem::missing_key("/charges");
        let stored = problem.clone().into_stored();
        assert_eq!(stored.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            stored.headers.get(CONTENT_TYPE).unwrap(),
            "application/problem+json"
        );
        assert!(stored.headers.get(RETRY_AFTER).is_none());
        assert_eq!(
            body(&problem),
            json!({
                "type": "https://pg-idempotency.dev/problems/missing-idempotency-key",
                "title": "Idempotency-Key is required",
                "status": 400,
                "detail": "/charges requires an Idempotency-Key header and the request has none",
                "hint": KEY_HINT,
            })
        );
        // Members in RFC 9457's order, type first.
        assert!(stored.body.starts_with(b"{\"type\":"));
    }

    #[test]
    fn no_hint_means_no_hint_member() {
        let mut problem = Problem::in_progress(Duration::from_secs(1));
        problem.hint = None;
        let value = body(&problem);
        assert!(value.get("hint").is_none(), "{value}");
        assert_eq!(value["status"], 409);
    }

    #[test]
    fn detail_with_quotes_and_non_ascii_stays_valid_json() {
        let mut problem = Problem::key_refused();
        problem.detail = "key \"x\\y\" is 600 bytes: ≥ 512".into();
        assert_eq!(body(&problem)["detail"], "key \"x\\y\" is 600 bytes: ≥ 512");
    }

    #[test]
    fn every_constructor_has_its_status_and_kind() {
        let cases = [
            (Problem::missing_key("/r"), 400, "missing-idempotency-key"),
            (
                Problem::bad_key(KeyError::Empty),
                400,
                "invalid-idempotency-key",
            ),
            (Problem::no_principal(), 401, "no-principal"),
            (Problem::body_too_large(1024), 413, "body-too-large"),
            (
                Problem::mismatch(StatusCode::UNPROCESSABLE_ENTITY),
                422,
                "idempotency-key-mismatch",
            ),
            (
                Problem::mismatch(StatusCode::CONFLICT),
                409,
                "idempotency-key-mismatch",
            ),
            (
                Problem::mismatch(StatusCode::BAD_REQUEST),
                400,
                "idempotency-key-mismatch",
            ),
            (
                Problem::in_progress(Duration::from_millis(1)),
                409,
                "request-in-progress",
            ),
            (
                Problem::store_unavailable(Duration::from_secs(2)),
                503,
                "idempotency-store-unavailable",
            ),
            (Problem::key_refused(), 400, "idempotency-key-refused"),
        ];
        for (problem, status, kind) in cases {
            assert_eq!(problem.status.as_u16(), status, "{kind}");
            assert_eq!(problem.kind, kind);
            let value = body(&problem);
            assert_eq!(value["status"], status, "{kind}");
            assert_eq!(value["type"], format!("{TYPE_BASE}{kind}"));
            assert!(!value["title"].as_str().unwrap().is_empty());
            assert!(!value["detail"].as_str().unwrap().is_empty());
            assert!(!value["hint"].as_str().unwrap().is_empty(), "{kind}");
        }
    }

    #[test]
    fn bad_key_carries_the_key_errors_text() {
        let error = KeyError::TooLong { len: 600, max: 512 };
        let value = body(&Problem::bad_key(error.clone()));
        assert_eq!(value["detail"], error.detail());
        assert_eq!(value["hint"], error.hint());
    }

    #[test]
    fn body_too_large_names_the_cap() {
        let value = body(&Problem::body_too_large(1_048_576));
        assert!(value["detail"].as_str().unwrap().contains("1048576"));
    }

    #[test]
    fn only_waiting_problems_carry_retry_after() {
        assert_eq!(
            retry_after_header(Problem::in_progress(Duration::from_secs(3))),
            Some("3".to_string())
        );
        assert_eq!(
            retry_after_header(Problem::store_unavailable(Duration::from_secs(5))),
            Some("5".to_string())
        );
        for problem in [
            Problem::missing_key("/r"),
            Problem::bad_key(KeyError::Unterminated),
            Problem::no_principal(),
            Problem::body_too_large(1),
            Problem::mismatch(StatusCode::UNPROCESSABLE_ENTITY),
            Problem::key_refused(),
        ] {
            let kind = problem.kind;
            assert_eq!(retry_after_header(problem), None, "{kind}");
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_at_least_one() {
        let cases = [
            (Duration::ZERO, 1),
            (Duration::from_nanos(1), 1),
            (Duration::from_millis(100), 1),
            (Duration::from_millis(999), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_millis(1001), 2),
            (Duration::from_millis(2500), 3),
            (Duration::from_secs(2), 2),
            (Duration::from_secs(3600), 3600),
            (Duration::MAX, u64::MAX),
        ];
        for (duration, seconds) in cases {
            assert_eq!(retry_after_seconds(duration), seconds, "{duration:?}");
        }
        assert_eq!(
            retry_after_header(Problem::in_progress(Duration::from_millis(1200))),
            Some("2".to_string())
        );
        assert_eq!(
            retry_after_header(Problem::store_unavailable(Duration::ZERO)),
            Some("1".to_string())
        );
    }

    #[test]
    fn into_response_is_a_first_answer() {
        let response = Problem::in_progress(Duration::from_millis(10)).into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
        assert!(response.headers().get("idempotent-replayed").is_none());
        assert_eq!(
            response.headers().get("content-length").unwrap(),
            response.body().len().to_string().as_str()
        );
    }
}
