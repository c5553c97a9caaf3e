//! What must be the same when a key repeats: the request's identity, which the store
//! hashes canonically into the record's fingerprint. A key sent again with a different
//! method, route, path, query, content type or body is a different request under a reused
//! key (a mismatch), never a replay of the first one's answer.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use http::{HeaderValue, Method, Uri};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// `{"method", "route", "path", "query", "content_type", "body_sha256"}` of one request.
/// `route` is the route template (`/charges/{id}`), `path` the concrete path
/// (`/charges/ch_1`); `query` and `content_type` are null when absent and taken as sent
/// (no reordering or case folding: a caller repeating a request repeats it exactly).
/// The body is hashed here so the store never holds it.
pub fn of(
    method: &Method,
    route: &str,
    uri: &Uri,
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> Value {
    json!({
        "method": method.as_str(),
        "route": route,
        "path": uri.path(),
        "query": uri.query(),
        "content_type": content_type.map(header_text),
        "body_sha256": hex(&Sha256::digest(body)),
    })
}

/// A header value as JSON: its text when it is UTF-8, else `{"base64": ...}`, so that two
/// different values never give the same fingerprint (a lossy conversion could).
fn header_text(value: &HeaderValue) -> Value {
    match std::str::from_utf8(value.as_bytes()) {
        Ok(text) => Value::String(text.to_string()),
        Err(_) => json!({ "base64": BASE64.encode(value.as_bytes()) }),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn uri(s: &str) -> Uri {
        s.parse().unwrap()
    }

    fn json_type() -> HeaderValue {
        HeaderValue::from_static("application/json")
    }

    fn base() -> Value {
        of(
            &Method::POST,
            "/charges",
            &uri("/charges?a=1"),
            Some(&json_type()),
            b"{\"amount\":5}",
        )
    }

    #[test]
    fn fields_are_the_documented_ones() {
        assert_eq!(
            base(),
            json!({
                "method": "POST",
                "route": "/charges",
                "path": "/charges",
                "query": "a=1",
                "content_type": "application/json",
                // sha256sum of {"amount":5}
                "body_sha256": "7e84cbf0f7a7c92c037058665d66152f8eb8580ab2534e52c877bccceb9cc7bf",
            })
        );
    }

    #[test]
    fn absent_query_and_content_type_are_null_and_empty_body_is_hashed() {
        let value = of(
            &Method::DELETE,
            "/charges/{id}",
            &uri("/charges/ch_1"),
            None,
            b"",
        );
        assert_eq!(
            value,
            json!({
                "method": "DELETE",
                "route": "/charges/{id}",
                "path": "/charges/ch_1",
                "query": null,
                "content_type": null,
                "body_sha256": EMPTY_SHA256,
            })
        );
    }

    #[test]
    fn an_absolute_uri_gives_its_path_and_query_only() {
        let value = of(
            &Method::POST,
            "/charges",
            &uri("http://example.com:8080/charges?a=1"),
            None,
            b"",
        );
        assert_eq!(value["path"], "/charges");
        assert_eq!(value["query"], "a=1");
        // An empty query is present, not absent.
        let value = of(&Method::POST, "/charges", &uri("/charges?"), None, b"");
        assert_eq!(value["query"], "");
    }

    #[test]
    fn each_field_changes_the_fingerprint() {
        let changed = [
            of(
                &Method::PUT,
                "/charges",
                &uri("/charges?a=1"),
                Some(&json_type()),
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges/{id}",
                &uri("/charges?a=1"),
                Some(&json_type()),
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges/?a=1"),
                Some(&json_type()),
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges?a=2"),
                Some(&json_type()),
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges"),
                Some(&json_type()),
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges?a=1"),
                Some(&HeaderValue::from_static("application/json; charset=utf-8")),
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges?a=1"),
                None,
                b"{\"amount\":5}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges?a=1"),
                Some(&json_type()),
                b"{\"amount\":6}",
            ),
            of(
                &Method::POST,
                "/charges",
                &uri("/charges?a=1"),
                Some(&json_type()),
                b"{\"amount\": 5}",
            ),
        ];
        for value in changed {
            assert_ne!(value, base());
        }
        assert_eq!(base(), base());
    }

    #[test]
    fn binary_body_is_hashed_not_kept() {
        let body: Vec<u8> = (0..=255u8).collect();
        let value = of(&Method::POST, "/upload", &uri("/upload"), None, &body);
        let hash = value["body_sha256"].as_str().unwrap();
        assert_eq!(hash.len(), 64);
        assert!(hash
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(
            hash,
            "40aff2e9d2d8922e47afd4648e6967497158785fbd1da870e7110266bf944880"
        );
    }

    #[test]
    fn non_utf8_content_types_stay_distinct() {
        let a = HeaderValue::from_bytes(b"text/x; q=\xff").unwrap();
        let b = HeaderValue::from_bytes(b"text/x; q=\xfe").unwrap();
        let fa = of(&Method::POST, "/r", &uri("/r"), Some(&a), b"");
        let fb = of(&Method::POST, "/r", &uri("/r"), Some(&b), b"");
        assert_ne!(fa, fb);
        assert_eq!(fa["content_type"], json!({"base64": "dGV4dC94OyBxPf8="}));
    }
}
