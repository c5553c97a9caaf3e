//! Which response headers the layer remembers and replays: an allow-list, never a
//! deny-list.
//!
//! A replay goes to whoever sends the same key again, not necessarily the client the first
//! answer was for: a session cookie minted for the first caller, or anything else the
//! handler meant for that one connection, must not be handed on. So only headers that
//! describe the representation or tell the client where to go next are kept (the default
//! list below), the operator may add names (`replay_headers`) and take any out
//! (`private_headers`), and some are never kept whatever the settings say. The filter runs
//! when the answer is stored (what is private is never written to the database) and again
//! when it is replayed (for records written before this list existed, or under other
//! settings).

use http::header::{
    HeaderName, CACHE_CONTROL, CONNECTION, CONTENT_DISPOSITION, CONTENT_ENCODING, CONTENT_LANGUAGE,
    CONTENT_LOCATION, CONTENT_TYPE, ETAG, EXPIRES, LAST_MODIFIED, LINK, LOCATION, RETRY_AFTER,
    VARY,
};
use http::HeaderMap;

/// The header a replay carries (the IETF draft's and Stripe's name for it).
pub const REPLAYED: &str = "idempotent-replayed";

/// The headers replayed unless the operator marks them private: what the representation
/// is (type, encoding, language, disposition), where it is (`Location`,
/// `Content-Location`, `Link`), how it may be cached (`Cache-Control`, `Expires`, `ETag`,
/// `Last-Modified`, `Vary`), and when to come back (`Retry-After`). `Content-Type` and
/// `Retry-After` are also the headers of the layer's own problem answers.
pub const DEFAULT_REPLAYED: [HeaderName; 13] = [
    CONTENT_TYPE,
    CONTENT_ENCODING,
    CONTENT_LANGUAGE,
    CONTENT_LOCATION,
    CONTENT_DISPOSITION,
    LOCATION,
    CACHE_CONTROL,
    EXPIRES,
    ETAG,
    LAST_MODIFIED,
    VARY,
    RETRY_AFTER,
    LINK,
];

/// Headers never stored or replayed, whatever the settings: cookies (one caller's
/// session), credentials, hop-by-hop headers (RFC 9110 7.6.1, and the non-standard ones
/// proxies still send), and the ones a replay writes for itself (`Date`, `Content-Length`,
/// `Idempotent-Replayed`).
pub const NEVER_REPLAYED: [&str; 17] = [
    "set-cookie",
    "set-cookie2",
    "authorization",
    "proxy-authorization",
    "authentication-info",
    "proxy-authentication-info",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authenticate",
    "date",
    "content-length",
    REPLAYED,
];

/// Whether `name` is one of `NEVER_REPLAYED`.
pub fn never_replayed(name: &HeaderName) -> bool {
    NEVER_REPLAYED.contains(&name.as_str())
}

/// The layer's header policy: the default list, plus `replay_headers`, minus
/// `private_headers`, minus `NEVER_REPLAYED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayHeaders {
    replayed: Vec<HeaderName>,
    private: Vec<HeaderName>,
}

impl Default for ReplayHeaders {
    fn default() -> ReplayHeaders {
        ReplayHeaders {
            replayed: DEFAULT_REPLAYED.to_vec(),
            private: Vec::new(),
        }
    }
}

/// A header name the operator gave that cannot be used: not a header name, or one of
/// `NEVER_REPLAYED` given to `replay`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNameRefused {
    pub name: String,
    pub reason: &'static str,
}

impl std::fmt::Display for HeaderNameRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the header {:?} {}", self.name, self.reason)
    }
}

impl std::error::Error for HeaderNameRefused {}

fn header_name(name: &str) -> Result<HeaderName, HeaderNameRefused> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| HeaderNameRefused {
        name: name.to_string(),
        reason: "is not a header name",
    })
}

impl ReplayHeaders {
    /// Also replays `names` (any case). A name of `NEVER_REPLAYED` is refused: a
    /// `Set-Cookie` would hand one caller's session to another.
    pub fn replay<I, N>(mut self, names: I) -> Result<ReplayHeaders, HeaderNameRefused>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        for name in names {
            let header = header_name(name.as_ref())?;
            if never_replayed(&header) {
                return Err(HeaderNameRefused {
                    name: name.as_ref().to_string(),
                    reason: "is never stored or replayed (cookies, credentials, hop-by-hop \
                             headers and the replay's own)",
                });
            }
            if !self.replayed.contains(&header) {
                self.replayed.push(header);
            }
        }
        Ok(self)
    }

    /// Never stores or replays `names` (any case), even those of the default list or of
    /// `replay`.
    pub fn private<I, N>(mut self, names: I) -> Result<ReplayHeaders, HeaderNameRefused>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        for name in names {
            let header = header_name(name.as_ref())?;
            if !self.private.contains(&header) {
                self.private.push(header);
            }
        }
        Ok(self)
    }

    /// Whether a header of this name is stored and replayed.
    pub fn keeps(&self, name: &HeaderName) -> bool {
        self.replayed.contains(name) && !self.private.contains(name) && !never_replayed(name)
    }

    /// The headers of `headers` that are kept, with their repeats and in their order. A
    /// header the response's `Connection` names is this connection's only (RFC 9110 7.6.1),
    /// whatever the list says.
    pub fn filter(&self, headers: &HeaderMap) -> HeaderMap {
        let named_by_connection = connection_options(headers);
        let mut kept = HeaderMap::with_capacity(headers.len());
        for (name, value) in headers {
            if self.keeps(name) && !named_by_connection.iter().any(|n| n == name.as_str()) {
                kept.append(name.clone(), value.clone());
            }
        }
        kept
    }
}

/// The header names a response's `Connection` lists (lower case).
fn connection_options(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(|name| String::from_utf8_lossy(name.trim_ascii()).to_ascii_lowercase())
        .filter(|name| !name.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn names(h: &HeaderMap) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect()
    }

    #[test]
    fn the_default_list_keeps_representation_headers_in_order_with_repeats() {
        let h = map(&[
            ("content-type", "application/json"),
            ("set-cookie", "session=abc"),
            ("link", "</a>; rel=next"),
            ("x-internal", "db=primary"),
            ("location", "/charges/1"),
            ("link", "</b>; rel=prev"),
            ("authorization", "Bearer secret"),
            ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("content-length", "2"),
        ]);
        assert_eq!(
            names(&ReplayHeaders::default().filter(&h)),
            [
                ("content-type".into(), "application/json".into()),
                // A HeaderMap keeps a name's repeats together, in their order.
                ("link".into(), "</a>; rel=next".into()),
                ("link".into(), "</b>; rel=prev".into()),
                ("location".into(), "/charges/1".into()),
            ]
        );
    }

    #[test]
    fn replay_adds_and_private_removes_in_any_case() {
        let policy = ReplayHeaders::default()
            .replay(["X-Request-Id"])
            .unwrap()
            .private(["Location", "x-request-id"])
            .unwrap()
            .replay(["x-charge-id"])
            .unwrap();
        let h = map(&[
            ("x-request-id", "r1"),
            ("x-charge-id", "c1"),
            ("location", "/x"),
            ("etag", "\"1\""),
        ]);
        assert_eq!(
            names(&policy.filter(&h)),
            [
                ("x-charge-id".into(), "c1".into()),
                ("etag".into(), "\"1\"".into()),
            ]
        );
    }

    #[test]
    fn never_replayed_headers_cannot_be_added() {
        for name in [
            "Set-Cookie",
            "set-cookie2",
            "Authorization",
            "transfer-encoding",
            "date",
        ] {
            let e = ReplayHeaders::default().replay([name]).unwrap_err();
            assert_eq!(e.name, name);
        }
        let e = ReplayHeaders::default().replay(["bad name"]).unwrap_err();
        assert_eq!(e.reason, "is not a header name");
        assert!(ReplayHeaders::default().private(["bad name"]).is_err());
    }

    #[test]
    fn a_header_the_connection_names_is_dropped() {
        let policy = ReplayHeaders::default()
            .replay(["x-kept", "x-hop"])
            .unwrap();
        let h = map(&[("connection", "X-Hop"), ("x-hop", "1"), ("x-kept", "2")]);
        assert_eq!(names(&policy.filter(&h)), [("x-kept".into(), "2".into())]);
    }
}
