//! Who may call the HTTP front, and as whom. It fails closed: with tokens configured, every
//! request carries one the proxy knows (a client's, naming its principal, or the gateway's,
//! whose principal header then names it), and nothing else (a header, a default) stands in
//! for a missing or wrong one. Without any credential configured, every request is made
//! for one configured principal (`anonymous`), which `Front::check` allows on loopback only
//! unless the operator says so.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::{Client, Front};
use crate::principal::Principal;

/// The principal of a front without authentication that names none.
pub const ANONYMOUS: &str = "anonymous";

/// The shortest token accepted: 128 bits of a random hex or base64 string is more.
pub const MIN_TOKEN_BYTES: usize = 16;

/// How a start-time message names a client entry (never by its token).
pub fn client_entry(index: usize, client: &Client) -> String {
    format!(
        "[[front.clients]] entry {} (principal {:?})",
        index + 1,
        client.principal
    )
}

/// `principal_header` as a header name, refused if it is not one or is a credential's.
pub fn principal_header_name(name: &str) -> Result<HeaderName> {
    let parsed = HeaderName::try_from(name).with_context(|| {
        format!("[front] principal_header = {name:?} is not an HTTP header name")
    })?;
    if parsed == header::AUTHORIZATION || parsed == header::COOKIE {
        bail!("[front] principal_header = {name:?} carries credentials, not a principal: name the header in which the gateway puts the principal (X-Principal, say)");
    }
    Ok(parsed)
}

/// A token as it is kept and compared: its SHA-256. Comparing fixed-length digests in
/// constant time tells a caller nothing about a token's length or its first bytes.
type Fingerprint = [u8; 32];

fn fingerprint(token: &str) -> Fingerprint {
    Sha256::digest(token.as_bytes()).into()
}

fn same(a: &Fingerprint, b: &Fingerprint) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The tokens the front accepts, read from the configuration and its variables.
pub struct Credentials {
    clients: Vec<(Fingerprint, String)>,
    gateway: Option<Fingerprint>,
}

/// Whom a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    Client(String),
    Gateway,
}

impl Credentials {
    /// Every token, each checked: set, long enough, sendable, and no two the same (a shared
    /// token would make two principals one). Messages name the entry, never the token.
    pub fn resolve(front: &Front, env: &dyn Fn(&str) -> Option<String>) -> Result<Credentials> {
        let mut seen: Vec<(Fingerprint, String)> = Vec::new();
        let mut clients = Vec::new();
        for (i, c) in front.clients.iter().enumerate() {
            let at = client_entry(i, c);
            let token = token_of(&at, c.token.as_deref(), c.token_env.as_deref(), env)?;
            clients.push((remember(&mut seen, &at, &token)?, c.principal.clone()));
        }
        let gateway = match (&front.gateway_token, &front.gateway_token_env) {
            (None, None) => None,
            (literal, var) => {
                let at = "[front] gateway_token".to_string();
                let token = token_of(&at, literal.as_deref(), var.as_deref(), env)?;
                Some(remember(&mut seen, &at, &token)?)
            }
        };
        Ok(Credentials { clients, gateway })
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty() && self.gateway.is_none()
    }

    /// The holder of `token`. Every entry is compared, a match or not, so the time taken
    /// does not say which entry matched.
    fn holder(&self, token: &str) -> Option<Holder> {
        let sent = fingerprint(token);
        let mut found = None;
        for (known, principal) in &self.clients {
            if same(known, &sent) && found.is_none() {
                found = Some(Holder::Client(principal.clone()));
            }
        }
        if let Some(gateway) = &self.gateway {
            if same(gateway, &sent) && found.is_none() {
                found = Some(Holder::Gateway);
            }
        }
        found
    }
}

fn token_of(
    at: &str,
    literal: Option<&str>,
    var: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String> {
    let (token, from) = match (literal, var) {
        (Some(t), None) => (t.to_string(), "its token".to_string()),
        (None, Some(var)) => match env(var) {
            Some(t) => (t, format!("the variable {var}")),
            None => bail!(
                "{at}: the variable {var} is not set: export it with the token, or fix token_env"
            ),
        },
        _ => bail!("{at} needs exactly one of a token and a token variable"),
    };
    if token.is_empty() {
        bail!("{at}: {from} is empty: set a random token of at least {MIN_TOKEN_BYTES} bytes (openssl rand -hex 32)");
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("{at}: {from} holds a space or a character outside printable ASCII, which no client can send in a bearer token: use a random hex or base64 token (openssl rand -hex 32)");
    }
    if token.len() < MIN_TOKEN_BYTES {
        bail!(
            "{at}: {from} is {} bytes, shorter than the {MIN_TOKEN_BYTES} accepted: use a random token (openssl rand -hex 32)",
            token.len()
        );
    }
    Ok(token)
}

fn remember(seen: &mut Vec<(Fingerprint, String)>, at: &str, token: &str) -> Result<Fingerprint> {
    let print = fingerprint(token);
    if let Some((_, first)) = seen.iter().find(|(p, _)| same(p, &print)) {
        bail!("{at} has the same token as {first}: give each client, and the gateway, a token of its own");
    }
    seen.push((print, at.to_string()));
    Ok(print)
}

/// The front's authentication, built at start.
pub struct Auth {
    credentials: Credentials,
    principal_header: Option<HeaderName>,
    /// The principal of every request when no credential is configured.
    open: String,
}

/// Why a request is refused before it reaches MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token: RFC 6750's bare challenge.
    Missing,
    /// A bearer token the proxy does not know, or an unusable `Authorization`.
    Invalid,
    /// The gateway's token without a principal in its header.
    NoPrincipal,
}

impl Auth {
    pub fn of(front: &Front) -> Result<Auth> {
        let credentials = Credentials::resolve(front, &|var| std::env::var(var).ok())?;
        if credentials.is_empty() {
            let principal = front.principal.as_deref().unwrap_or(ANONYMOUS);
            if front.allow_unauthenticated {
                tracing::warn!(principal, "no authentication (allow_unauthenticated): anyone who reaches the HTTP front calls as this principal");
            } else {
                tracing::info!(
                    principal,
                    "no authentication on loopback: every request calls as this principal"
                );
            }
        }
        Ok(Auth {
            credentials,
            principal_header: front
                .principal_header
                .as_deref()
                .map(principal_header_name)
                .transpose()?,
            open: front.principal.clone().unwrap_or_else(|| ANONYMOUS.into()),
        })
    }

    /// The request's principal, or why it is refused.
    pub fn principal(&self, headers: &HeaderMap) -> Result<String, Refusal> {
        if self.credentials.is_empty() {
            return Ok(self.open.clone());
        }
        let token = bearer(headers)?.ok_or(Refusal::Missing)?;
        match self.credentials.holder(token).ok_or(Refusal::Invalid)? {
            // A client's token names its principal; a principal header it sends is not
            // looked at.
            Holder::Client(principal) => Ok(principal),
            Holder::Gateway => {
                let name = self.principal_header.as_ref().ok_or(Refusal::NoPrincipal)?;
                single(headers, name)
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .ok_or(Refusal::NoPrincipal)
            }
        }
    }
}

/// The bearer token of `Authorization`, its scheme in any case (RFC 7235). None without
/// the header or with another scheme; refused when it is there twice or unreadable.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(Refusal::Invalid);
    }
    let text = value.to_str().map_err(|_| Refusal::Invalid)?.trim();
    let (scheme, token) = text.split_once(' ').unwrap_or((text, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Ok(None);
    }
    match token.trim() {
        "" => Err(Refusal::Invalid),
        token => Ok(Some(token)),
    }
}

/// The value of a header sent exactly once, as text.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// A refusal of the front: the status, and a short JSON body `{"error", "hint"}` that says
/// what to do and nothing about the proxy's insides.
pub fn refused(status: StatusCode, error: &str, hint: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"error": error, "hint": hint}).to_string(),
    )
        .into_response()
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (challenge, error, hint) = match self {
            Refusal::Missing => (
                "Bearer",
                "unauthorized",
                "send Authorization: Bearer <token> with a token the proxy was given",
            ),
            Refusal::Invalid => (
                "Bearer error=\"invalid_token\"",
                "invalid_token",
                "the bearer token is not one the proxy accepts: check the token you were given",
            ),
            Refusal::NoPrincipal => (
                "Bearer error=\"invalid_request\"",
                "missing_principal",
                "the gateway's request names no principal: set the principal header",
            ),
        };
        let mut response = refused(StatusCode::UNAUTHORIZED, error, hint);
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
        response
    }
}

/// The middleware: the request goes on with its `Principal`, or is answered 401.
pub async fn authenticate(
    State(auth): State<Arc<Auth>>,
    mut request: Request,
    next: Next,
) -> Response {
    match auth.principal(request.headers()) {
        Ok(p) => {
            request.extensions_mut().insert(Principal(p));
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "token-of-tenant-a-0123456789";
    const B: &str = "token-of-tenant-b-0123456789";
    const G: &str = "token-of-the-gateway-0123456789";

    fn front(text: &str) -> Front {
        let config: crate::config::Config = toml::from_str(text).unwrap();
        config.front
    }

    fn auth(text: &str) -> Auth {
        let front = front(text);
        Auth {
            credentials: Credentials::resolve(&front, &|_| None).unwrap(),
            principal_header: front
                .principal_header
                .as_deref()
                .map(|h| principal_header_name(h).unwrap()),
            open: front.principal.unwrap_or_else(|| ANONYMOUS.into()),
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::try_from(*k).unwrap(),
                HeaderValue::try_from(*v).unwrap(),
            );
        }
        h
    }

    fn tokens_and_gateway() -> Auth {
        auth(&format!(
            "[front]\nprincipal_header = \"x-principal\"\ngateway_token = \"{G}\"\nclients = [{{ token = \"{A}\", principal = \"a\" }}, {{ token = \"{B}\", principal = \"b\" }}]\n"
        ))
    }

    #[test]
    fn a_client_token_names_its_principal_whatever_the_header_says() {
        let auth = tokens_and_gateway();
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            let h = headers(&[
                ("authorization", &format!("{scheme} {A}")),
                ("x-principal", "b"),
            ]);
            assert_eq!(auth.principal(&h), Ok("a".into()), "{scheme}");
        }
    }

    #[test]
    fn nothing_stands_in_for_a_missing_or_wrong_token() {
        let auth = tokens_and_gateway();
        assert_eq!(
            auth.principal(&headers(&[("x-principal", "b")])),
            Err(Refusal::Missing)
        );
        assert_eq!(
            auth.principal(&headers(&[
                ("authorization", "Basic YTpi"),
                ("x-principal", "b")
            ])),
            Err(Refusal::Missing)
        );
        for wrong in [
            "bearer nope",
            "Bearer token-of-tenant-a-012345678",
            "Bearer ",
            "Bearer",
        ] {
            let h = headers(&[("authorization", wrong), ("x-principal", "b")]);
            assert_eq!(auth.principal(&h), Err(Refusal::Invalid), "{wrong}");
        }
        let twice = headers(&[
            ("authorization", &format!("Bearer {A}")),
            ("authorization", &format!("Bearer {B}")),
        ]);
        assert_eq!(auth.principal(&twice), Err(Refusal::Invalid));
    }

    #[test]
    fn the_gateway_names_the_principal_in_its_header() {
        let auth = tokens_and_gateway();
        let bearer = format!("Bearer {G}");
        let h = headers(&[("authorization", &bearer), ("x-principal", " tenant-z ")]);
        assert_eq!(auth.principal(&h), Ok("tenant-z".into()));
        for missing in [
            headers(&[("authorization", &bearer)]),
            headers(&[("authorization", &bearer), ("x-principal", "  ")]),
            headers(&[
                ("authorization", &bearer),
                ("x-principal", "a"),
                ("x-principal", "b"),
            ]),
        ] {
            assert_eq!(auth.principal(&missing), Err(Refusal::NoPrincipal));
        }
    }

    #[test]
    fn without_credentials_every_request_is_the_open_principal() {
        let open = auth("[front]\n");
        assert_eq!(
            open.principal(&headers(&[("authorization", "Bearer whatever")])),
            Ok(ANONYMOUS.into())
        );
        let named = auth("[front]\nprincipal = \"ops\"\n");
        assert_eq!(named.principal(&headers(&[])), Ok("ops".into()));
    }

    #[test]
    fn tokens_are_checked_without_being_shown() {
        let short = "[front]\nclients = [{ token = \"short-secret\", principal = \"a\" }]\n";
        let err = Credentials::resolve(&front(short), &|_| None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("entry 1 (principal \"a\")"), "{err}");
        assert!(err.contains("12 bytes"), "{err}");
        assert!(!err.contains("short-secret"), "{err}");
        let from_env = "[front]\nclients = [{ token_env = \"T\", principal = \"a\" }]\n";
        for (value, says) in [
            (None, "is not set"),
            (Some(""), "is empty"),
            (Some("with a space in it, long enough"), "printable ASCII"),
        ] {
            let err = Credentials::resolve(&front(from_env), &|_| value.map(str::to_string))
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains(says), "{err}");
            assert!(
                err.contains("the variable T") || err.contains("variable T"),
                "{err}"
            );
        }
        let twice = format!("[front]\nprincipal_header = \"x-p\"\ngateway_token = \"{A}\"\nclients = [{{ token = \"{A}\", principal = \"a\" }}]\n");
        let err = Credentials::resolve(&front(&twice), &|_| None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("same token"), "{err}");
        assert!(!err.contains(A), "{err}");
    }
}
