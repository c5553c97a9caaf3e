//! A response as the store remembers it, and its replay.
//!
//! What a retry gets back is what the first call's caller got, as far as it may be handed
//! to whoever sends the same key: the status, the body byte for byte (binary or not), and
//! the headers the layer's `ReplayHeaders` keeps (headers.rs: an allow-list; never
//! `Set-Cookie`, credentials, hop-by-hop headers, `Date` or `Content-Length`), with their
//! repeats and order (two `Link` stay two, in order). Header values are kept as bytes
//! because HTTP allows values that are not UTF-8. The replay says `Date` and
//! `Content-Length` again, for its own time and connection.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, DATE};
use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};
use std::fmt;
use std::time::SystemTime;

use crate::headers::{ReplayHeaders, REPLAYED};

/// A response to remember and replay. Build it with `capture` (a handler's response) or
/// `Problem::into_stored`; store it as `to_json`, read it back with `from_json`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why a stored JSON value is not a `StoredResponse` (written by something else, or
/// damaged): `path` says where, `reason` what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredError {
    pub path: String,
    pub reason: String,
}

impl StoredError {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        StoredError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for StoredError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stored response: {}: {}", self.path, self.reason)
    }
}

impl std::error::Error for StoredError {}

impl StoredResponse {
    /// The parts of a handler's response that may be replayed, with its buffered body: the
    /// status and the headers `kept` keeps.
    pub fn capture(
        parts: &http::response::Parts,
        body: Bytes,
        kept: &ReplayHeaders,
    ) -> StoredResponse {
        StoredResponse {
            status: parts.status,
            headers: kept.filter(&parts.headers),
            body,
        }
    }

    /// This response with only the headers `kept` keeps (what a handler built itself, for
    /// `RequestClaim::complete_in`, before it is stored).
    pub fn kept(&self, kept: &ReplayHeaders) -> StoredResponse {
        StoredResponse {
            status: self.status,
            headers: kept.filter(&self.headers),
            body: self.body.clone(),
        }
    }

    /// `{"status": 201, "headers": [["name", "<base64 of the value>"], ...], "body": "<base64>"}`
    /// (standard base64): the form kept in the record's `response`.
    pub fn to_json(&self) -> Value {
        let headers: Vec<Value> = self
            .headers
            .iter()
            .map(|(name, value)| json!([name.as_str(), BASE64.encode(value.as_bytes())]))
            .collect();
        json!({
            "status": self.status.as_u16(),
            "headers": headers,
            "body": BASE64.encode(&self.body),
        })
    }

    /// The response `to_json` wrote. Fields it does not know are ignored (a later version
    /// may add some); anything missing or of the wrong shape is an error naming the field.
    pub fn from_json(value: &Value) -> Result<StoredResponse, StoredError> {
        let object = value
            .as_object()
            .ok_or_else(|| StoredError::new("$", "not a JSON object"))?;

        let status = object
            .get("status")
            .ok_or_else(|| StoredError::new("status", "missing"))?;
        let status = status
            .as_u64()
            .and_then(|code| u16::try_from(code).ok())
            .and_then(|code| StatusCode::from_u16(code).ok())
            .ok_or_else(|| StoredError::new("status", format!("not an HTTP status: {status}")))?;

        let list = object
            .get("headers")
            .ok_or_else(|| StoredError::new("headers", "missing"))?
            .as_array()
            .ok_or_else(|| StoredError::new("headers", "not an array"))?;
        let mut headers = HeaderMap::with_capacity(list.len());
        for (i, pair) in list.iter().enumerate() {
            let (name, value) = header_pair(pair)
                .map_err(|reason| StoredError::new(format!("headers[{i}]"), reason))?;
            headers.append(name, value);
        }

        let body = object
            .get("body")
            .ok_or_else(|| StoredError::new("body", "missing"))?
            .as_str()
            .ok_or_else(|| StoredError::new("body", "not a string"))?;
        let body = BASE64
            .decode(body)
            .map_err(|e| StoredError::new("body", format!("not standard base64: {e}")))?;

        Ok(StoredResponse {
            status,
            headers,
            body: Bytes::from(body),
        })
    }

    /// The response a retry gets: the stored status and body, the stored headers `kept`
    /// keeps (a record written before the allow-list, or under other settings, may hold
    /// more), marked `Idempotent-Replayed: true`, with a `Date` of now and the body's
    /// `Content-Length`.
    pub fn replay(&self, kept: &ReplayHeaders) -> Response<Bytes> {
        let mut response = self.kept(kept).into_response();
        let headers = response.headers_mut();
        headers.insert(REPLAYED, HeaderValue::from_static("true"));
        let date = HeaderValue::from_str(&http_date(SystemTime::now()))
            .expect("an IMF-fixdate is a valid header value");
        headers.insert(DATE, date);
        response
    }

    /// The response as a first answer (a problem the layer answers itself): no
    /// `Idempotent-Replayed`, the body's `Content-Length`.
    pub fn into_response(self) -> Response<Bytes> {
        let length = self.body.len();
        let mut response = Response::new(self.body);
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        // RFC 9110 8.6: no Content-Length on 1xx and 204; on 304 it would describe the
        // representation, which a stored 304 does not have.
        let bodiless = self.status.is_informational()
            || self.status == StatusCode::NO_CONTENT
            || self.status == StatusCode::NOT_MODIFIED;
        if !bodiless {
            response
                .headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(length));
        }
        response
    }
}

/// Whether the response asks not to be stored: a `Cache-Control` directive `no-store`
/// (case-insensitive, in any of the header's lines, among comma-separated directives; a
/// `no-store` inside another directive's quoted argument does not count).
pub fn is_no_store(headers: &HeaderMap) -> bool {
    headers
        .get_all(CACHE_CONTROL)
        .iter()
        .any(|value| directives(value.as_bytes()).any(|d| d.eq_ignore_ascii_case(b"no-store")))
}

/// The names of a Cache-Control value's directives (`max-age=60` gives `max-age`),
/// splitting on commas outside quoted strings.
fn directives(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in value.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts.into_iter().map(|part| {
        let name = part.split(|&b| b == b'=').next().unwrap_or(part);
        name.trim_ascii()
    })
}

fn header_pair(pair: &Value) -> Result<(HeaderName, HeaderValue), String> {
    let pair = pair
        .as_array()
        .filter(|pair| pair.len() == 2)
        .ok_or("not a [name, base64 value] pair")?;
    let name = pair[0].as_str().ok_or("the name is not a string")?;
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))?;
    let value = pair[1].as_str().ok_or("the value is not a string")?;
    let value = BASE64
        .decode(value)
        .map_err(|e| format!("the value is not standard base64: {e}"))?;
    let value = HeaderValue::from_bytes(&value)
        .map_err(|_| "the value is not a header value".to_string())?;
    Ok((name, value))
}

/// `time` as an HTTP date (RFC 9110 5.6.7's IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`.
pub(crate) fn http_date(time: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // A clock before 1970 is not worth a panic in a response path: say 1970.
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        day,
        MONTHS[(month - 1) as usize],
        year,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31) in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn parts(status: u16, headers: &[(&str, &[u8])]) -> http::response::Parts {
        let mut builder = Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, HeaderValue::from_bytes(value).unwrap());
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn pairs(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
        headers
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    fn binary_body() -> Bytes {
        Bytes::from((0..=255u8).chain([0, 0xff, 0xfe]).collect::<Vec<u8>>())
    }

    fn with_raw() -> ReplayHeaders {
        ReplayHeaders::default()
            .replay(["x-raw", "x-kept"])
            .unwrap()
    }

    #[test]
    fn capture_keeps_allowed_headers_with_repeats_in_order_and_no_cookie() {
        let parts = parts(
            201,
            &[
                ("content-type", b"application/octet-stream"),
                ("set-cookie", b"a=1; Path=/"),
                ("link", b"</a>; rel=next"),
                ("location", b"/charges/1"),
                ("set-cookie", b"b=2; HttpOnly"),
                ("link", b"</b>; rel=prev"),
                ("x-raw", b"caf\xe9 \x80\xff"),
                ("x-not-listed", b"dropped"),
            ],
        );
        let stored = StoredResponse::capture(&parts, binary_body(), &with_raw());
        assert_eq!(stored.status, StatusCode::CREATED);
        assert!(stored.headers.get("set-cookie").is_none());
        assert!(stored.headers.get("x-not-listed").is_none());
        let links: Vec<&[u8]> = stored
            .headers
            .get_all("link")
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(links, [&b"</a>; rel=next"[..], b"</b>; rel=prev"]);
        assert_eq!(
            stored.headers.get("x-raw").unwrap().as_bytes(),
            b"caf\xe9 \x80\xff"
        );
        assert_eq!(stored.headers.len(), 5);
        assert_eq!(stored.body, binary_body());
    }

    #[test]
    fn capture_drops_hop_by_hop_date_and_content_length() {
        let parts = parts(
            200,
            &[
                ("connection", b"keep-alive, X-Conn-Only"),
                ("connection", b"x-other-hop"),
                ("keep-alive", b"timeout=5"),
                ("proxy-connection", b"keep-alive"),
                ("transfer-encoding", b"chunked"),
                ("te", b"trailers"),
                ("trailer", b"x-checksum"),
                ("upgrade", b"h2c"),
                ("date", b"Sun, 06 Nov 1994 08:49:37 GMT"),
                ("content-length", b"3"),
                ("x-conn-only", b"dropped: Connection names it"),
                ("x-other-hop", b"dropped too"),
                ("x-kept", b"kept"),
            ],
        );
        let kept = with_raw().replay(["x-conn-only", "x-other-hop"]).unwrap();
        let stored = StoredResponse::capture(&parts, Bytes::from_static(b"abc"), &kept);
        assert_eq!(
            pairs(&stored.headers),
            [("x-kept".to_string(), b"kept".to_vec())]
        );
    }

    #[test]
    fn json_round_trip_is_byte_for_byte() {
        let parts = parts(
            201,
            &[
                ("link", b"</a>"),
                ("content-type", b"image/png"),
                ("link", b"</b>"),
                ("x-raw", b"\x80\x81 not utf-8 \xff"),
                ("x-empty", b""),
            ],
        );
        let kept = with_raw().replay(["x-empty"]).unwrap();
        let stored = StoredResponse::capture(&parts, binary_body(), &kept);
        assert_eq!(stored.headers.len(), 5);
        let json = stored.to_json();
        // Through the text the database would hold, not only the in-memory value.
        let text = serde_json::to_string(&json).unwrap();
        let back = StoredResponse::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back, stored);
        assert_eq!(pairs(&back.headers), pairs(&stored.headers));
        assert_eq!(back.body, binary_body());
    }

    #[test]
    fn json_form_is_the_documented_one() {
        let stored = StoredResponse {
            status: StatusCode::CREATED,
            headers: {
                let mut h = HeaderMap::new();
                h.append("set-cookie", HeaderValue::from_static("a=1"));
                h.append("set-cookie", HeaderValue::from_static("b=2"));
                h
            },
            body: Bytes::from_static(b"\x00\xffhi"),
        };
        assert_eq!(
            stored.to_json(),
            json!({
                "status": 201,
                "headers": [["set-cookie", "YT0x"], ["set-cookie", "Yj0y"]],
                "body": "AP9oaQ==",
            })
        );
    }

    #[test]
    fn empty_body_and_no_headers_round_trip() {
        let stored = StoredResponse {
            status: StatusCode::NO_CONTENT,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        assert_eq!(
            StoredResponse::from_json(&stored.to_json()).unwrap(),
            stored
        );
    }

    #[test]
    fn from_json_names_what_is_wrong() {
        let good = json!({"status": 200, "headers": [["a", "eA=="]], "body": ""});
        assert!(StoredResponse::from_json(&good).is_ok());
        // Unknown fields are ignored.
        let extra = json!({"status": 200, "headers": [], "body": "", "later": 1});
        assert!(StoredResponse::from_json(&extra).is_ok());

        let cases = [
            (json!("text"), "$"),
            (json!(null), "$"),
            (json!({"headers": [], "body": ""}), "status"),
            (
                json!({"status": "200", "headers": [], "body": ""}),
                "status",
            ),
            (json!({"status": 99, "headers": [], "body": ""}), "status"),
            (
                json!({"status": 70000, "headers": [], "body": ""}),
                "status",
            ),
            (json!({"status": -1, "headers": [], "body": ""}), "status"),
            (json!({"status": 200, "body": ""}), "headers"),
            (json!({"status": 200, "headers": {}, "body": ""}), "headers"),
            (
                json!({"status": 200, "headers": [["a"]], "body": ""}),
                "headers[0]",
            ),
            (
                json!({"status": 200, "headers": [["a", "eA==", "x"]], "body": ""}),
                "headers[0]",
            ),
            (
                json!({"status": 200, "headers": [[1, "eA=="]], "body": ""}),
                "headers[0]",
            ),
            (
                json!({"status": 200, "headers": [["a b", "eA=="]], "body": ""}),
                "headers[0]",
            ),
            (
                json!({"status": 200, "headers": [["a", "not base64!"]], "body": ""}),
                "headers[0]",
            ),
            // base64 of "\n": a control character is no header value.
            (
                json!({"status": 200, "headers": [["a", "Cg=="]], "body": ""}),
                "headers[0]",
            ),
            (
                json!({"status": 200, "headers": [["a", "eA=="], "x"]}),
                "headers[1]",
            ),
            (json!({"status": 200, "headers": []}), "body"),
            (json!({"status": 200, "headers": [], "body": 5}), "body"),
            (json!({"status": 200, "headers": [], "body": "%%%"}), "body"),
        ];
        for (value, path) in cases {
            let error = StoredResponse::from_json(&value).expect_err(&value.to_string());
            assert_eq!(error.path, path, "{value}: {error}");
            assert!(error.to_string().contains(path));
        }
    }

    #[test]
    fn replay_marks_the_response_and_recomputes_date_and_length() {
        let parts = parts(
            201,
            &[
                ("link", b"</a>"),
                ("x-raw", b"\xff\xfe"),
                ("link", b"</b>"),
                ("date", b"Sun, 06 Nov 1994 08:49:37 GMT"),
                ("content-length", b"999"),
            ],
        );
        let stored = StoredResponse::capture(&parts, binary_body(), &with_raw());
        let stored = StoredResponse::from_json(&stored.to_json()).unwrap();
        let before = SystemTime::now();
        let response = stored.replay(&with_raw());
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.body(), &binary_body());
        let headers = response.headers();
        assert_eq!(headers.get(REPLAYED).unwrap(), "true");
        assert_eq!(
            headers.get(CONTENT_LENGTH).unwrap(),
            binary_body().len().to_string().as_str()
        );
        let links: Vec<_> = headers.get_all("link").iter().collect();
        assert_eq!(links, ["</a>", "</b>"]);
        assert_eq!(headers.get("x-raw").unwrap().as_bytes(), b"\xff\xfe");
        let dates: Vec<_> = headers.get_all(DATE).iter().collect();
        assert_eq!(dates.len(), 1);
        let date = dates[0].to_str().unwrap();
        // Fresh: now, to the second (the clock may tick between the two readings).
        let now = [before, SystemTime::now()].map(http_date);
        assert!(now.contains(&date.to_string()), "{date} vs {now:?}");
        assert_eq!(headers.len(), 6);
    }

    #[test]
    fn a_record_holding_cookies_replays_none_of_them() {
        // What an earlier version stored: every end-to-end header, Set-Cookie included.
        let old = json!({
            "status": 201,
            "headers": [["set-cookie", "YT0x"], ["content-type", "dGV4dC9wbGFpbg=="],
                        ["x-session-token", "c2VjcmV0"]],
            "body": "",
        });
        let stored = StoredResponse::from_json(&old).unwrap();
        let response = stored.replay(&ReplayHeaders::default());
        assert!(response.headers().get("set-cookie").is_none());
        assert!(response.headers().get("x-session-token").is_none());
        assert_eq!(
            response.headers().get("content-type").unwrap(),
            "text/plain"
        );
    }

    #[test]
    fn replay_keeps_a_single_replayed_header() {
        let mut headers = HeaderMap::new();
        headers.append(REPLAYED, HeaderValue::from_static("false"));
        let stored = StoredResponse {
            status: StatusCode::OK,
            headers,
            body: Bytes::new(),
        };
        let response = stored.replay(&ReplayHeaders::default());
        let values: Vec<_> = response.headers().get_all(REPLAYED).iter().collect();
        assert_eq!(values, ["true"]);
        assert_eq!(response.headers().get(CONTENT_LENGTH).unwrap(), "0");
    }

    #[test]
    fn into_response_is_not_marked_replayed() {
        let stored = StoredResponse {
            status: StatusCode::BAD_REQUEST,
            headers: HeaderMap::new(),
            body: Bytes::from_static(b"{}"),
        };
        let response = stored.into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(response.headers().get(REPLAYED).is_none());
        assert_eq!(response.headers().get(CONTENT_LENGTH).unwrap(), "2");
        assert_eq!(response.body(), &Bytes::from_static(b"{}"));
    }

    #[test]
    fn bodiless_statuses_get_no_content_length() {
        for status in [StatusCode::NO_CONTENT, StatusCode::NOT_MODIFIED] {
            let stored = StoredResponse {
                status,
                headers: HeaderMap::new(),
                body: Bytes::new(),
            };
            let replayed = stored.replay(&ReplayHeaders::default());
            assert!(replayed.headers().get(CONTENT_LENGTH).is_none());
            assert!(stored
                .into_response()
                .headers()
                .get(CONTENT_LENGTH)
                .is_none());
        }
    }

    #[test]
    fn no_store_is_a_cache_control_directive() {
        let with = |values: &[&[u8]]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(CACHE_CONTROL, HeaderValue::from_bytes(v).unwrap());
            }
            is_no_store(&headers)
        };
        assert!(with(&[b"no-store"]));
        assert!(with(&[b"No-Store"]));
        assert!(with(&[b"private, no-store, max-age=0"]));
        assert!(with(&[b"private,no-store"]));
        assert!(with(&[b"max-age=0", b"NO-STORE"]));
        assert!(with(&[b" no-store "]));
        assert!(!with(&[]));
        assert!(!with(&[b"no-cache"]));
        assert!(!with(&[b"no-storey"]));
        assert!(!with(&[b"x-no-store"]));
        assert!(!with(&[b"private=\"no-store\""]));
        assert!(!with(&[b"private=\"set-cookie, no-store\", max-age=5"]));
        assert!(!with(&[b"private=\"a, no-store, b\""]));
        // An escaped quote does not end the quoted string.
        assert!(!with(&[b"private=\"a\\\", no-store, b\""]));
        assert!(with(&[b"private=\"a, b\", no-store"]));
        // Another header saying no-store is not Cache-Control.
        let mut headers = HeaderMap::new();
        headers.insert("pragma", HeaderValue::from_static("no-store"));
        assert!(!is_no_store(&headers));
    }

    #[test]
    fn http_date_is_imf_fixdate() {
        let at = |secs: u64| http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        // RFC 9110's own example.
        assert_eq!(at(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        // A leap day and the end of a leap year.
        assert_eq!(at(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(at(1_735_689_599), "Tue, 31 Dec 2024 23:59:59 GMT");
        assert_eq!(at(4_107_542_400), "Mon, 01 Mar 2100 00:00:00 GMT");
    }
}
