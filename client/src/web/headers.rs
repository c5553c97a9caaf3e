//! Request headers set by an action (static) or by one call (a bearer token): checked where
//! they are set, refused where they are used (at registration, at the call), and never
//! stored, nor part of the key or fingerprint unless an action names them.

use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use serde_json::Value;

use crate::call::Call;
use crate::error::Error;

/// The executor sends this one itself: the call's key, the same on every attempt.
const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Headers for a web action's requests: an action's own (`Action::header`), or one call's
/// (`WebExecutor::execute_call(name, input, Headers::new().bearer(token))`). A call's
/// header replaces the action's of the same name, and both replace the HTTP client's
/// default of that name.
///
/// A name or value HTTP cannot carry, and `Idempotency-Key` (the executor owns it), is
/// remembered and refused where the headers are used: an action's by `register`, a call's
/// by `execute_call`, before anything is claimed or sent. Values are marked sensitive, so
/// `Debug` never prints them (any header may hold a secret).
#[derive(Debug, Clone, Default)]
pub struct Headers {
    map: HeaderMap,
    refused: Option<Refusal>,
}

/// Why a header was refused; kept until the headers are used, where it becomes an
/// `InvalidArgument` naming the action or the call.
#[derive(Debug, Clone)]
struct Refusal {
    message: String,
    detail: String,
    hint: &'static str,
}

impl Headers {
    pub fn new() -> Headers {
        Headers::default()
    }

    /// Sets a header, replacing an earlier value of that name.
    pub fn header(mut self, name: impl AsRef<str>, value: impl AsRef<[u8]>) -> Headers {
        let name = name.as_ref();
        match checked(name, value.as_ref()) {
            Ok((name, value)) => {
                self.map.insert(name, value);
            }
            Err(refusal) => {
                // The first refusal is the one reported; later headers change nothing.
                self.refused.get_or_insert(refusal);
            }
        }
        self
    }

    /// `Authorization: Bearer <token>`.
    pub fn bearer(self, token: impl std::fmt::Display) -> Headers {
        self.header(AUTHORIZATION, format!("Bearer {token}"))
    }

    /// The headers, as they will be sent.
    pub fn map(&self) -> &HeaderMap {
        &self.map
    }

    /// `Err` (InvalidArgument) if a header was refused; `whose` says where they were set
    /// ("action charge", "this call").
    pub(crate) fn check(&self, whose: &str) -> crate::error::Result<()> {
        match &self.refused {
            None => Ok(()),
            Some(r) => Err(Error::invalid(format!("{whose}: {}", r.message))
                .with_detail(r.detail.clone())
                .with_hint(r.hint)),
        }
    }

    /// These headers over `under`: each name set here replaces all of `under`'s values
    /// of that name.
    pub(crate) fn over(&self, under: &HeaderMap) -> HeaderMap {
        let mut merged = under.clone();
        for name in self.map.keys() {
            merged.remove(name);
            for value in self.map.get_all(name) {
                merged.append(name.clone(), value.clone());
            }
        }
        merged
    }
}

impl From<HeaderMap> for Headers {
    /// A map of your own; an `Idempotency-Key` in it is refused where the headers are used.
    fn from(map: HeaderMap) -> Headers {
        let mut headers = Headers::new();
        for (name, value) in &map {
            if name == IDEMPOTENCY_KEY {
                headers.refused.get_or_insert(idempotency_key_refused());
                continue;
            }
            let mut value = value.clone();
            value.set_sensitive(true);
            headers.map.append(name.clone(), value);
        }
        headers
    }
}

impl From<Headers> for Call {
    /// A call that carries these headers, for `WebExecutor::execute_call`.
    fn from(headers: Headers) -> Call {
        Call::new().extension(headers)
    }
}

/// The values of `names` in `headers`, for a fingerprint: one value as the hex SHA-256 of
/// its text, several as an array of those, a missing one as null. Hashed here, so that a
/// header's value (a token, an account) never reaches the store, not even to be hashed.
pub(crate) fn values_of(names: &[HeaderName], headers: &HeaderMap) -> Value {
    let text = |v: &HeaderValue| {
        let hash = pg_idempotency_canon::sha256(&String::from_utf8_lossy(v.as_bytes()));
        Value::String(pg_idempotency_canon::key_of(&hash))
    };
    Value::Object(
        names
            .iter()
            .map(|name| {
                let values: Vec<Value> = headers.get_all(name).iter().map(text).collect();
                let value = match values.len() {
                    0 => Value::Null,
                    1 => values.into_iter().next().unwrap_or(Value::Null),
                    _ => Value::Array(values),
                };
                (name.as_str().to_string(), value)
            })
            .collect(),
    )
}

fn parsed_name(name: &str) -> Result<HeaderName, Refusal> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| Refusal {
        message: format!("{name:?} is not a valid HTTP header name"),
        detail: "A header name is a token: letters, digits and !#$%&'*+-.^_`|~, without spaces, colons or line breaks.".into(),
        hint: "Fix the name (\"Authorization\", \"X-Api-Version\"); the value goes in the second argument.",
    })
}

/// A header an action or a call may set: valid HTTP, and not `Idempotency-Key`.
fn checked(name: &str, value: &[u8]) -> Result<(HeaderName, HeaderValue), Refusal> {
    let name = parsed_name(name)?;
    if name == IDEMPOTENCY_KEY {
        return Err(idempotency_key_refused());
    }
    // The value is not quoted back: it may be a secret.
    let mut value = HeaderValue::from_bytes(value).map_err(|_| Refusal {
        message: format!("the value of header {name} is not a valid HTTP header value"),
        detail: "It holds a line break or another control character, which would end the header or be refused by the HTTP library.".into(),
        hint: "Remove line breaks and control characters from the value (a token read from a file often ends with a newline: trim it).",
    })?;
    value.set_sensitive(true);
    Ok((name, value))
}

fn idempotency_key_refused() -> Refusal {
    Refusal {
        message: "Idempotency-Key cannot be set as a header".into(),
        detail: "The executor sends it on POST, PUT, PATCH and DELETE: the call's key (or the record's upstream key under UpstreamKey::Record), the same on every attempt of the call, a takeover included.".into(),
        hint: "Name the call with its key strategy instead: Idempotent::key_supplier(..) for a key of your own, or UpstreamKey::Record to send the record's uuid.",
    }
}

/// A fingerprint header's name, or its refusal (at registration).
pub(crate) fn fingerprint_name(action: &str, name: &str) -> crate::error::Result<HeaderName> {
    parsed_name(name).map_err(|r| {
        Error::invalid(format!("action {action}: fingerprint header {}", r.message))
            .with_detail(r.detail)
            .with_hint(r.hint)
    })
}
