//! An endpoint with path parameters (`https://api.example.com/v1/customers/{id}`), filled
//! from the input's top-level fields, each percent-encoded as path segment text.
//!
//! A field used in the path is not sent again in the body or the query: as in OpenAPI, a
//! path parameter is a parameter of its own. It stays in the input, so the key and the
//! fingerprint still name it (two customers with the same body are two calls).

use serde_json::{Map, Value};

use crate::error::{Error, Result};

#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Param(String),
}

#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pieces: Vec<Piece>,
}

impl Endpoint {
    /// The endpoint's template, or a refusal (at registration): a brace without its pair,
    /// an empty or nested name, or a parameter outside the path (the host, the query).
    pub(crate) fn parse(action: &str, endpoint: &str) -> Result<Endpoint> {
        let refused = |why: String| {
            Error::invalid(format!("action {action}: the endpoint {endpoint:?} is not a valid template"))
                .with_detail(why)
                .with_hint("Write each path parameter as {name}, inside the path only (https://api.example.com/v1/customers/{id}); the input's field of that name fills it.")
        };
        let path_start = endpoint
            .find("://")
            .map(|s| {
                let after = s + 3;
                after
                    + endpoint[after..]
                        .find(['/', '?', '#'])
                        .unwrap_or(endpoint.len() - after)
            })
            .unwrap_or(0);
        let path_end = path_start
            + endpoint[path_start..]
                .find(['?', '#'])
                .unwrap_or(endpoint.len() - path_start);
        let mut pieces = Vec::new();
        let mut rest = endpoint;
        let mut at = 0;
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return Err(refused(format!(
                    "A '}}' at byte {} closes no '{{'.",
                    at + open
                )));
            }
            let Some(len) = rest[open + 1..].find(['{', '}']) else {
                return Err(refused(format!(
                    "The '{{' at byte {} is never closed.",
                    at + open
                )));
            };
            let name = &rest[open + 1..open + 1 + len];
            if !rest[open + 1 + len..].starts_with('}') {
                return Err(refused(format!(
                    "The '{{' at byte {} opens another before it closes.",
                    at + open
                )));
            }
            if name.is_empty() || name.contains('/') {
                return Err(refused(format!(
                    "The parameter {{{name}}} has no name, or a '/' in it."
                )));
            }
            if at + open < path_start || at + open > path_end {
                return Err(refused(format!(
                    "The parameter {{{name}}} is outside the path (in the scheme and host, or in the query); only path segments take parameters."
                )));
            }
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            pieces.push(Piece::Param(name.to_string()));
            let next = open + len + 2;
            at += next;
            rest = &rest[next..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        Ok(Endpoint { pieces })
    }

    fn params(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Param(name) => Some(name.as_str()),
            Piece::Text(_) => None,
        })
    }

    pub(crate) fn has_params(&self) -> bool {
        self.params().next().is_some()
    }

    /// Refuses an input that cannot fill every parameter, before anything is claimed or
    /// sent.
    pub(crate) fn check(&self, action: &str, input: &Value) -> Result<()> {
        if !self.has_params() {
            return Ok(());
        }
        let Some(fields) = input.as_object() else {
            return Err(Error::invalid(format!(
                "action {action} fills its endpoint's path parameters from the input's fields, which needs an object"
            ))
            .with_detail(format!("The input is {}.", kind_of(input)))
            .with_hint("Pass an object with a string or number field for each path parameter."));
        };
        for name in self.params() {
            segment(fields, name).map_err(|why| {
                Error::invalid(format!("action {action}: path parameter {{{name}}} cannot be filled"))
                    .with_detail(why)
                    .with_hint(format!("Give the input a top-level field {name:?} holding a non-empty string or a number; it is sent percent-encoded as path segment text (and not in the body or the query)."))
            })?;
        }
        Ok(())
    }

    /// The URL for this input, and the input less the fields the path used. `Err` (the
    /// reason) only for an input `check` refuses.
    pub(crate) fn fill(&self, input: Value) -> std::result::Result<(String, Value), String> {
        if !self.has_params() {
            let url = self.pieces.iter().map(|p| match p {
                Piece::Text(t) | Piece::Param(t) => t.as_str(),
            });
            return Ok((url.collect(), input));
        }
        let Value::Object(mut fields) = input else {
            return Err(format!("the input is {}, not an object", kind_of(&input)));
        };
        let mut url = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => url.push_str(t),
                Piece::Param(name) => url.push_str(&segment(&fields, name)?),
            }
        }
        for name in self.params() {
            fields.remove(name);
        }
        Ok((url, Value::Object(fields)))
    }
}

/// The field `name` as path segment text: a string as it is, a number as its JSON text,
/// percent-encoded but for RFC 3986's unreserved characters (so '/', '?', '#', '%' and a
/// space stay inside the segment). An empty value, "." and ".." are refused: as a segment
/// they would name another resource (the collection, or a parent after dot-segment
/// removal, which URL parsers apply even to "%2E%2E").
fn segment(fields: &Map<String, Value>, name: &str) -> std::result::Result<String, String> {
    let text = match fields.get(name) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => return Err(format!("The input's field {name:?} is {}.", kind_of(other))),
        None => return Err(format!("The input has no field {name:?}.")),
    };
    if matches!(text.as_str(), "" | "." | "..") {
        return Err(format!(
            "The input's field {name:?} is {text:?}, which as a path segment would name another resource."
        ));
    }
    Ok(percent_encoded(&text))
}

fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fill(endpoint: &str, input: Value) -> (String, Value) {
        let e = Endpoint::parse("a", endpoint).unwrap();
        e.check("a", &input).unwrap();
        e.fill(input).unwrap()
    }

    #[test]
    fn parameters_fill_the_path_and_leave_the_body() {
        assert_eq!(
            fill(
                "https://h/v1/customers/{id}/notes/{n}.json?x=1",
                json!({"id": "a/b c", "n": 7, "memo": "m"})
            ),
            (
                "https://h/v1/customers/a%2Fb%20c/notes/7.json?x=1".into(),
                json!({"memo": "m"})
            )
        );
        assert_eq!(
            fill("https://h/{id}", json!({"id": "é?#%~._-"})),
            ("https://h/%C3%A9%3F%23%25~._-".into(), json!({}))
        );
        assert_eq!(
            fill("https://h/{id}/{id}", json!({"id": -1.5})).0,
            "https://h/-1.5/-1.5"
        );
    }

    #[test]
    fn an_endpoint_without_parameters_sends_any_input() {
        assert_eq!(
            fill("https://h/x", json!([1])),
            ("https://h/x".into(), json!([1]))
        );
    }

    #[test]
    fn bad_templates_are_refused() {
        for bad in [
            "https://h/{id",
            "https://h/id}",
            "https://h/{}",
            "https://h/{a{b}}",
            "https://{region}.h/x",
            "https://h/x?id={id}",
            "https://h/x#{id}",
        ] {
            let e = Endpoint::parse("a", bad).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::InvalidArgument, "{bad}");
            assert!(e.detail().is_some() && e.hint().is_some(), "{bad}");
        }
    }

    #[test]
    fn values_that_cannot_be_a_segment_are_refused() {
        let e = Endpoint::parse("a", "https://h/c/{id}").unwrap();
        for input in [
            json!({}),
            json!({"id": null}),
            json!({"id": {}}),
            json!({"id": [1]}),
            json!({"id": true}),
            json!({"id": ""}),
            json!({"id": "."}),
            json!({"id": ".."}),
            json!("x"),
        ] {
            let err = e.check("a", &input).unwrap_err();
            assert_eq!(err.kind, crate::ErrorKind::InvalidArgument, "{input}");
            assert!(err.detail().is_some() && err.hint().is_some(), "{input}");
        }
    }
}
