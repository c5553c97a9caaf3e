//! A message the proxy cannot take is answered, on both fronts alike, with a JSON-RPC error
//! that says what is wrong with it (docs/mcp.md "Malformed messages"):
//!
//! - what does not parse as JSON (or is empty, or not UTF-8): `-32700`, `"id": null`;
//! - JSON that is not a JSON-RPC request, notification or response (a batch, a scalar, a
//!   wrong `jsonrpc`, an `id` that is neither a string nor an integer, a `method` that is no
//!   string): `-32600`, with the message's `id` when it has a readable one, else `null`;
//! - a request whose `params` cannot be read: `-32602` with its `id`;
//! - a notification (a `method`, no `id`) that cannot be read: dropped unanswered, as
//!   JSON-RPC 2.0 forbids answering a notification;
//! - a line or body over the front's size bound: `-32600`, `"id": null`.
//!
//! rmcp's transports answer some of these with plain text (HTTP) or not at all (stdio): the
//! fronts read each message here first and hand rmcp only what it can take.

use http::StatusCode;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use serde_json::{json, Map, Value};

/// UTF-8's byte order mark, which RFC 8259 lets a parser skip (rmcp's stdio does).
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What a message is.
#[derive(Debug)]
pub enum Read {
    /// One JSON-RPC message rmcp takes as it is.
    Message(Box<ClientJsonRpcMessage>),
    /// A notification the proxy cannot read: never answered, only logged.
    Dropped(String),
    /// A message refused with this answer.
    Refused(Refusal),
}

/// The JSON-RPC error a malformed message is answered with, and the HTTP status it goes
/// with on the HTTP front.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The message's own id when it has a readable one (`Value::Null` otherwise).
    pub id: Value,
    pub code: ErrorCode,
    pub kind: &'static str,
    pub message: String,
    pub detail: String,
    pub hint: String,
    pub status: StatusCode,
}

impl Refusal {
    fn new(code: ErrorCode, kind: &'static str, message: &str, detail: String, hint: &str) -> Self {
        Refusal {
            id: Value::Null,
            code,
            kind,
            message: message.into(),
            detail,
            hint: hint.into(),
            status: StatusCode::BAD_REQUEST,
        }
    }

    fn with_id(mut self, id: Option<Value>) -> Refusal {
        self.id = id.unwrap_or(Value::Null);
        self
    }

    pub fn with_status(mut self, status: StatusCode) -> Refusal {
        self.status = status;
        self
    }

    /// The JSON-RPC error response: `"id"` is always there, `null` when the message had
    /// no readable one (JSON-RPC 2.0, section 5).
    pub fn answer(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {
                "code": self.code.0,
                "message": self.message,
                "data": {"kind": self.kind, "detail": self.detail, "hint": self.hint},
            },
        })
    }
}

/// Parse error: the bytes are not one JSON value.
pub fn parse_error(detail: String) -> Refusal {
    Refusal::new(
        ErrorCode::PARSE_ERROR,
        "parse_error",
        "parse error: the message is not JSON",
        detail,
        "Send one JSON-RPC 2.0 message as UTF-8 JSON: one line of its own on stdio, the body of one POST over HTTP.",
    )
}

/// Invalid request: JSON, but no JSON-RPC message.
pub fn invalid_request(kind: &'static str, detail: String, hint: &str) -> Refusal {
    Refusal::new(
        ErrorCode::INVALID_REQUEST,
        kind,
        "invalid request: the message is not a JSON-RPC 2.0 request, notification or response",
        detail,
        hint,
    )
}

/// A line or body over the front's bound, refused unread.
pub fn too_large(what: &str, bound: usize) -> Refusal {
    Refusal::new(
        ErrorCode::INVALID_REQUEST,
        "too_large",
        "invalid request: the message is larger than the proxy takes",
        format!("The {what} is over {bound} bytes; it was not read."),
        "Send a smaller message: large inputs belong in a resource or a file the tool reads, not in the call.",
    )
}

const SHAPE_HINT: &str = "A JSON-RPC 2.0 message is an object with \"jsonrpc\": \"2.0\"; a request has a \"method\" (a string) and an \"id\" (a string or an integer), a notification a \"method\" and no \"id\", a response an \"id\" and a \"result\" or an \"error\".";

/// What `bytes`, one line of stdio or one POST body, hold.
pub fn read(bytes: &[u8]) -> Read {
    let bytes = bytes.strip_prefix(BOM).unwrap_or(bytes);
    // The common case first, parsed as rmcp parses it.
    if let Ok(message) = serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        return Read::Message(Box::new(message));
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return Read::Refused(parse_error(format!(
                "The message is not UTF-8 text: the byte at offset {} is not.",
                e.valid_up_to()
            )))
        }
    };
    if text.trim().is_empty() {
        return Read::Refused(parse_error("The message is empty.".into()));
    }
    let value = match serde_json::from_str::<Value>(text) {
        Ok(value) => value,
        Err(e) => return Read::Refused(parse_error(format!("{e}."))),
    };
    match value {
        Value::Object(object) => read_object(object),
        Value::Array(items) => Read::Refused(invalid_request(
            "batch_refused",
            format!("The message is a batch (a JSON array of {} members).", items.len()),
            "Send each message on its own: one line each on stdio, one POST each over HTTP (MCP removed JSON-RPC batches in its 2025-06-18 revision).",
        )),
        other => Read::Refused(invalid_request(
            "invalid_request",
            format!("The message is a JSON {}, not an object.", json_type(&other)),
            SHAPE_HINT,
        )),
    }
}

fn read_object(object: Map<String, Value>) -> Read {
    let id = readable_id(object.get("id"));
    let refused = |detail: String| {
        Read::Refused(invalid_request("invalid_request", detail, SHAPE_HINT).with_id(id.clone()))
    };
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return refused(match object.get("jsonrpc") {
            None => "The message has no \"jsonrpc\" member.".into(),
            Some(v) => format!("\"jsonrpc\" is {}, not \"2.0\".", shown(v)),
        });
    }
    if let (Some(given), None) = (object.get("id"), &id) {
        return refused(format!(
            "\"id\" is {}, neither a string nor an integer.",
            shown(given)
        ));
    }
    let method = match object.get("method") {
        None => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(other) => return refused(format!("\"method\" is {}, not a string.", shown(other))),
    };
    if method.is_none() && !(object.contains_key("result") || object.contains_key("error")) {
        return refused(
            "The message has neither a \"method\" nor a \"result\" or \"error\".".into(),
        );
    }
    if method.is_none() && id.is_none() {
        return refused("A response without an \"id\".".into());
    }
    let params = object.get("params").map_or("absent", json_type);
    let error = match serde_json::from_value::<ClientJsonRpcMessage>(Value::Object(object)) {
        Ok(message) => return Read::Message(Box::new(message)),
        Err(e) => e,
    };
    match (method, id) {
        (Some(method), None) => Read::Dropped(format!(
            "a {method} notification that cannot be read: {error}"
        )),
        (Some(method), id) => Read::Refused(
            Refusal::new(
                ErrorCode::INVALID_PARAMS,
                "invalid_params",
                &format!("invalid params: the params of this {method} request cannot be read"),
                format!("\"params\" ({params}) do not match the schema of {method} ({error})."),
                "Send the params the method's schema in the MCP specification describes.",
            )
            .with_id(id),
        ),
        (None, id) => Read::Refused(
            invalid_request(
                "invalid_request",
                format!("The response cannot be read: {error}."),
                SHAPE_HINT,
            )
            .with_id(id),
        ),
    }
}

/// A JSON-RPC id the answer can carry: a string or an integer (MCP forbids `null`).
fn readable_id(id: Option<&Value>) -> Option<Value> {
    match id? {
        Value::String(s) => Some(Value::String(s.clone())),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(Value::Number(n.clone())),
        _ => None,
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A member's value as the detail shows it: short scalars as they are, the rest by type
/// (the detail never echoes a caller's large input back).
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if s.len() <= 32 => format!("{s:?}"),
        Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        other => format!("a {}", json_type(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(bytes: &[u8]) -> Refusal {
        match read(bytes) {
            Read::Refused(r) => r,
            other => panic!("{:?} was taken: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    #[test]
    fn what_does_not_parse_is_a_parse_error_without_id() {
        for bytes in [&b"garbage"[..], b"{\"jsonrpc\":", b"", b"  ", b"\xff\xfe{}"] {
            let r = refused(bytes);
            assert_eq!(r.code, ErrorCode::PARSE_ERROR, "{bytes:?}");
            assert_eq!(r.answer()["id"], Value::Null);
            assert!(r.answer().as_object().unwrap().contains_key("id"));
        }
    }

    #[test]
    fn json_that_is_no_message_is_an_invalid_request() {
        for (bytes, id) in [
            (&br#"{"hello":1}"#[..], Value::Null),
            (br#"[]"#, Value::Null),
            (
                br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                Value::Null,
            ),
            (br#"42"#, Value::Null),
            (br#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#, json!(7)),
            (br#"{"jsonrpc":"2.0","id":"a","method":5}"#, json!("a")),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                Value::Null,
            ),
            (br#"{"jsonrpc":"2.0","id":3}"#, json!(3)),
        ] {
            let r = refused(bytes);
            assert_eq!(r.code, ErrorCode::INVALID_REQUEST, "{bytes:?}");
            assert_eq!(r.answer()["id"], id, "{bytes:?}");
        }
    }

    #[test]
    fn messages_pass_and_bad_notifications_are_dropped() {
        assert!(matches!(
            read(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Read::Message(_)
        ));
        assert!(matches!(
            read(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"),
            Read::Message(_)
        ));
        assert!(matches!(
            read(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#),
            Read::Dropped(_)
        ));
    }

    #[test]
    fn a_request_with_unreadable_params_keeps_its_id() {
        let r = refused(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":5}"#);
        assert_eq!(r.code, ErrorCode::INVALID_PARAMS);
        assert_eq!(r.answer()["id"], json!(9));
    }
}
