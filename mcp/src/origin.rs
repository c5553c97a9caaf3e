//! The `Origin` check of the HTTP front, against DNS rebinding (the MCP Streamable HTTP
//! transport says servers must validate it): a page on another site that gets a browser to
//! reach the proxy is refused with 403. A request without `Origin` does not come from a
//! page (agents, SDK clients) and is not checked here; its credential is.

use std::sync::Arc;

use anyhow::{bail, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::config::Front;

/// An origin, `scheme://host[:port]`, lower-cased, its default port dropped: the form a
/// browser sends, so equal origins compare equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// An `Origin` header's value; None for anything else (`null`, a path, garbage).
    pub fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.split_once("://")?;
        if scheme.is_empty()
            || !scheme
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        {
            return None;
        }
        let (host, port) = match rest.strip_prefix('[') {
            Some(v6) => {
                let (inside, after) = v6.split_once(']')?;
                inside.parse::<std::net::Ipv6Addr>().ok()?;
                (format!("[{inside}]"), after)
            }
            None => {
                let end = rest.find(':').unwrap_or(rest.len());
                let host = &rest[..end];
                if host.is_empty()
                    || !host
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
                {
                    return None;
                }
                (host.to_string(), &rest[end..])
            }
        };
        let port = match port {
            "" => None,
            p => {
                let digits = p.strip_prefix(':')?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some(digits.parse::<u16>().ok()?)
            }
        };
        let scheme = scheme.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        };
        Some(Origin {
            port: port.filter(|p| Some(*p) != default),
            host: host.to_ascii_lowercase(),
            scheme,
        })
    }

    /// An entry of `[front] allowed_origins` (a trailing `/` tolerated), or why not.
    pub fn configured(text: &str) -> Result<Origin> {
        match Origin::parse(text.strip_suffix('/').unwrap_or(text)) {
            Some(o) => Ok(o),
            None => bail!(
                "[front] allowed_origins: {text:?} is not an origin: write scheme://host[:port], as browsers send it (https://app.example.com)"
            ),
        }
    }

    /// http(s) on localhost, 127.0.0.1 or [::1], any port: a page served from this
    /// machine.
    fn is_loopback(&self) -> bool {
        matches!(self.scheme.as_str(), "http" | "https")
            && matches!(self.host.as_str(), "localhost" | "127.0.0.1" | "[::1]")
    }
}

/// The origins a front accepts: loopback ones, or the configured list instead.
pub struct Origins {
    allowed: Option<Vec<Origin>>,
}

impl Origins {
    pub fn of(front: &Front) -> Result<Origins> {
        let allowed = match &front.allowed_origins {
            Some(list) => Some(
                list.iter()
                    .map(|o| Origin::configured(o))
                    .collect::<Result<Vec<_>>>()?,
            ),
            None => None,
        };
        Ok(Origins { allowed })
    }

    /// Whether the request may go on: no `Origin`, or one `Origin` that is allowed.
    pub fn allow(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::ORIGIN).iter();
        let Some(value) = values.next() else {
            return true;
        };
        if values.next().is_some() {
            return false;
        }
        let Some(origin) = value.to_str().ok().and_then(Origin::parse) else {
            return false;
        };
        match &self.allowed {
            Some(list) => list.contains(&origin),
            None => origin.is_loopback(),
        }
    }
}

/// The middleware: 403 for an `Origin` not allowed, before anything else is looked at.
pub async fn check(State(origins): State<Arc<Origins>>, request: Request, next: Next) -> Response {
    if origins.allow(request.headers()) {
        return next.run(request).await;
    }
    crate::auth::refused(
        StatusCode::FORBIDDEN,
        "origin_not_allowed",
        "this Origin may not call the proxy: the operator lists the web origins it accepts in [front] allowed_origins",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_origin(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::ORIGIN, HeaderValue::try_from(*v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_origins_by_default() {
        let o = Origins { allowed: None };
        assert!(o.allow(&HeaderMap::new()), "no Origin: not a browser");
        for ok in [
            "http://localhost",
            "http://localhost:5173",
            "https://127.0.0.1:8443",
            "http://[::1]:3000",
            "HTTP://LOCALHOST:80",
        ] {
            assert!(o.allow(&with_origin(&[ok])), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "http://evil.example/localhost",
            "http://user@localhost",
            "file://localhost",
            "null",
            "localhost",
            "http://localhost:99999",
            "http://[::2]",
        ] {
            assert!(!o.allow(&with_origin(&[bad])), "{bad}");
        }
        assert!(!o.allow(&with_origin(&["http://localhost", "http://evil.example"])));
    }

    #[test]
    fn a_configured_list_replaces_loopback() {
        let o = Origins {
            allowed: Some(vec![
                Origin::configured("https://app.example/").unwrap(),
                Origin::configured("http://tools.example:8080").unwrap(),
            ]),
        };
        for ok in [
            "https://app.example",
            "https://APP.example:443",
            "http://tools.example:8080",
        ] {
            assert!(o.allow(&with_origin(&[ok])), "{ok}");
        }
        for bad in [
            "http://app.example",
            "https://app.example:8443",
            "http://tools.example",
            "http://localhost:8080",
        ] {
            assert!(!o.allow(&with_origin(&[bad])), "{bad}");
        }
        for wrong in ["app.example", "https://app.example/path", "*", ""] {
            assert!(Origin::configured(wrong).is_err(), "{wrong}");
        }
    }
}
