//! Malformed messages, as raw bytes, on both fronts: every one is answered with a JSON-RPC
//! error (docs/mcp.md "Malformed messages"), `"id": null` unless the message had a
//! readable id, and the session goes on. On stdio the lines are written to the proxy's
//! stdin and its stdout read; each case ends with a `ping`, whose answer comes after the
//! answers to the lines before it (they are written in order), so that a line left
//! unanswered shows as a missing answer, not as a wait. Over HTTP the requests are sent
//! with reqwest, their bodies as given.

use crate::common::raw_stdio::{initialize, StdioProxy, VERSION};
use crate::common::*;
use serde_json::{json, Value};

const TOKEN: &str = "malformed-token-0123456789abcdef";

/// A JSON-RPC error response with `code` and the id `id` (`"id"` present, even as null).
fn assert_error(answer: &Value, code: i64, id: Value, kind: &str) {
    assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
    assert!(
        answer.as_object().is_some_and(|o| o.contains_key("id")),
        "the answer has no \"id\": {answer}"
    );
    assert_eq!(answer["id"], id, "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    assert_eq!(answer["error"]["data"]["kind"], kind, "{answer}");
    assert!(answer["error"]["data"]["hint"].is_string(), "{answer}");
    assert!(answer["error"]["data"]["detail"].is_string(), "{answer}");
}

#[tokio::test]
async fn stdio_garbage_line_is_a_parse_error_with_null_id() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-garbage").await else {
        return;
    };
    let answer = p.answer_to(b"this is not json").await;
    assert_error(&answer, -32700, Value::Null, "parse_error");
    p.stop().await;
}

#[tokio::test]
async fn stdio_bytes_that_are_not_utf8_are_a_parse_error() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-utf8").await else {
        return;
    };
    let answer = p
        .answer_to(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}")
        .await;
    assert_error(&answer, -32700, Value::Null, "parse_error");
    p.stop().await;
}

#[tokio::test]
async fn stdio_json_that_is_no_message_is_an_invalid_request_with_null_id() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-shape").await else {
        return;
    };
    for line in [&br#"{"hello":1}"#[..], b"42", b"\"ping\"", b"null"] {
        let answer = p.answer_to(line).await;
        assert_error(&answer, -32600, Value::Null, "invalid_request");
    }
    p.stop().await;
}

#[tokio::test]
async fn stdio_invalid_request_keeps_a_readable_id() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-id").await else {
        return;
    };
    let answer = p
        .answer_to(br#"{"jsonrpc":"1.0","id":7,"method":"ping"}"#)
        .await;
    assert_error(&answer, -32600, json!(7), "invalid_request");
    let answer = p
        .answer_to(br#"{"jsonrpc":"2.0","id":"r-1","method":5}"#)
        .await;
    assert_error(&answer, -32600, json!("r-1"), "invalid_request");
    // An id that is neither a string nor an integer is no id to answer with.
    let answer = p
        .answer_to(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#)
        .await;
    assert_error(&answer, -32600, Value::Null, "invalid_request");
    p.stop().await;
}

#[tokio::test]
async fn stdio_batch_is_refused_with_one_error() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-batch").await else {
        return;
    };
    let answer = p
        .answer_to(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#)
        .await;
    assert_error(&answer, -32600, Value::Null, "batch_refused");
    let answer = p.answer_to(b"[]").await;
    assert_error(&answer, -32600, Value::Null, "batch_refused");
    p.stop().await;
}

#[tokio::test]
async fn stdio_unreadable_params_are_invalid_params_with_the_request_id() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-params").await else {
        return;
    };
    let answer = p
        .answer_to(br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":5}"#)
        .await;
    assert_error(&answer, -32602, json!(5), "invalid_params");
    assert_eq!(p.counting.count("send_email"), 0);
    p.stop().await;
}

/// Blank lines are no messages: skipped, unanswered (docs/decisions.md); a notification
/// that cannot be read is not answered either (JSON-RPC 2.0 answers no notification).
#[tokio::test]
async fn stdio_blank_lines_and_unreadable_notifications_are_not_answered() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-blank").await else {
        return;
    };
    let answers = p
        .answers_to(&[
            b"",
            b"   ",
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
            b"garbage",
        ])
        .await;
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_error(&answers[0], -32700, Value::Null, "parse_error");
    p.stop().await;
}

/// A line over the bound (rmcp's 16 MiB) is refused unread, with an answer, and the next
/// line is read as the next message.
#[tokio::test]
async fn stdio_line_over_the_bound_is_refused_with_a_json_rpc_error() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-large").await else {
        return;
    };
    let bound = pg_idempotency_mcp::stdio_front::MAX_LINE_BYTES;
    let mut line = br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"pad":""#.to_vec();
    line.resize(bound + 1, b'x');
    line.extend_from_slice(br#""}}"#);
    let answer = p.answer_to(&line).await;
    assert_error(&answer, -32600, Value::Null, "too_large");
    p.stop().await;
}

/// A key with U+0000 is told so, with a hint for that; a key too long is told its length.
#[tokio::test]
async fn stdio_key_with_nul_is_told_it_holds_nul() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-nul-key").await else {
        return;
    };
    let call = |id: u64, key: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "send_email", "arguments": {"to": "a@x", "subject": "s"},
            "_meta": {"pg-idempotency/key": key}}})
        .to_string()
    };
    let answer = p.reply(1, &call(1, "ab\0cd")).await;
    let error = &answer["error"];
    assert_eq!(error["code"], -32602, "{answer}");
    let message = error["message"].as_str().unwrap_or_default();
    let hint = error["data"]["hint"].as_str().unwrap_or_default();
    assert!(message.contains("U+0000"), "{answer}");
    assert!(!message.contains("bytes long"), "{answer}");
    assert!(
        hint.contains("U+0000") && !hint.contains("longer"),
        "{answer}"
    );
    let answer = p.reply(2, &call(2, &"k".repeat(600))).await;
    let error = &answer["error"];
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("600 bytes long"), "{answer}");
    assert!(!message.contains("U+0000"), "{answer}");
    assert_eq!(p.counting.count("send_email"), 0);
    p.stop().await;
}

/// A key reused with other arguments: the hint names the proxy's setting as the proxy's
/// configuration spells it, and the operator's log line shows the fingerprints' detail
/// once.
#[tokio::test]
async fn stdio_key_reused_hint_and_log_in_the_proxys_words() {
    let Some(mut p) = StdioProxy::start("malformed-stdio-reused").await else {
        return;
    };
    let call = |id: u64, to: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "send_email", "arguments": {"to": to, "subject": "s"},
            "_meta": {"pg-idempotency/key": "reused-1"}}})
        .to_string()
    };
    let first = p.reply(1, &call(1, "a@x")).await;
    assert!(first["result"].is_object(), "{first}");
    let reused = p.reply(2, &call(2, "eve@x")).await;
    assert_eq!(reused["error"]["code"], -32072, "{reused}");
    let hint = reused["error"]["data"]["hint"].as_str().unwrap_or_default();
    assert!(hint.contains("on_mismatch = \"ignore\""), "{hint}");
    assert!(!hint.contains("=>") && !hint.contains("'ignore'"), "{hint}");
    // The refusal is logged before it is answered.
    let log = std::fs::read_to_string(&p.log).unwrap();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("a call refused"))
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    assert_eq!(
        refused[0].matches("The key was first used").count(),
        1,
        "the detail is logged more than once: {}",
        refused[0]
    );
    assert!(!refused[0].contains("on_mismatch =>"), "{}", refused[0]);
    assert_eq!(p.counting.count("send_email"), 1);
    p.stop().await;
}

/// The proxy over Streamable HTTP, one bearer token.
struct HttpFront {
    proxy: HttpProxy,
    http: reqwest::Client,
    _counting: Counting,
}

async fn http_front(case: &str) -> Option<HttpFront> {
    let (parts, python) = Parts::python_or_skip()?;
    let counting = Counting::new(&parts, &python, case);
    let name = pg_idempotency_tests::scope("malformed");
    let rest = format!(
        "[front]\nclients = [{{ token = {}, principal = \"tenant-a\" }}]\n\n{}",
        toml_str(TOKEN),
        counting.upstream_stdio(&name)
    );
    let config = write_config(&counting.dir, &rest);
    let proxy = HttpProxy::start(&config, &counting.env()).await;
    Some(HttpFront {
        proxy,
        http: reqwest::Client::new(),
        _counting: counting,
    })
}

/// Status, Content-Type and body of an answer.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
    session: Option<String>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{e}: the body is not JSON: {}", self.body))
    }
}

impl HttpFront {
    async fn post(&self, content_type: Option<&str>, body: impl Into<reqwest::Body>) -> Answer {
        let mut req = self
            .http
            .post(&self.proxy.url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(t) = content_type {
            req = req.header("content-type", t);
        }
        Self::answer(req.send().await.unwrap()).await
    }

    async fn answer(resp: reqwest::Response) -> Answer {
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type").unwrap_or_default();
        let session = header("mcp-session-id");
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        Answer {
            status,
            content_type,
            body,
            session,
        }
    }

    /// `body` as JSON: a 400 with a JSON-RPC error, `code` and `id`.
    async fn refused(&self, body: &[u8], code: i64, id: Value, kind: &str) {
        let answer = self.post(Some("application/json"), body.to_vec()).await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        assert!(
            answer.content_type.starts_with("application/json"),
            "{}",
            answer.content_type
        );
        assert_error(&answer.json(), code, id, kind);
    }

    async fn stop(mut self) {
        self.proxy.kill().await;
    }
}

#[tokio::test]
async fn http_garbage_body_is_400_with_a_parse_error() {
    let Some(f) = http_front("malformed-http-garbage").await else {
        return;
    };
    f.refused(b"this is not json", -32700, Value::Null, "parse_error")
        .await;
    f.refused(b"{\"jsonrpc\":", -32700, Value::Null, "parse_error")
        .await;
    // Authentication comes first: a caller without a token learns nothing of its body.
    let anonymous = f
        .http
        .post(&f.proxy.url)
        .header("content-type", "application/json")
        .body("this is not json")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    f.stop().await;
}

#[tokio::test]
async fn http_empty_body_is_400_with_a_parse_error() {
    let Some(f) = http_front("malformed-http-empty").await else {
        return;
    };
    f.refused(b"", -32700, Value::Null, "parse_error").await;
    f.stop().await;
}

#[tokio::test]
async fn http_json_that_is_no_message_is_400_invalid_request_with_null_id() {
    let Some(f) = http_front("malformed-http-shape").await else {
        return;
    };
    f.refused(br#"{"hello":1}"#, -32600, Value::Null, "invalid_request")
        .await;
    f.refused(b"42", -32600, Value::Null, "invalid_request")
        .await;
    f.stop().await;
}

#[tokio::test]
async fn http_invalid_request_keeps_a_readable_id() {
    let Some(f) = http_front("malformed-http-id").await else {
        return;
    };
    f.refused(
        br#"{"jsonrpc":"1.0","id":"r-1","method":"ping"}"#,
        -32600,
        json!("r-1"),
        "invalid_request",
    )
    .await;
    f.refused(
        br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":5}"#,
        -32602,
        json!(12),
        "invalid_params",
    )
    .await;
    f.stop().await;
}

#[tokio::test]
async fn http_batch_is_400_with_one_error() {
    let Some(f) = http_front("malformed-http-batch").await else {
        return;
    };
    f.refused(
        br#"[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]"#,
        -32600,
        Value::Null,
        "batch_refused",
    )
    .await;
    f.stop().await;
}

/// A Content-Type other than JSON: 415, with a JSON-RPC error body (docs/decisions.md).
#[tokio::test]
async fn http_wrong_content_type_is_415_with_a_json_rpc_error() {
    let Some(f) = http_front("malformed-http-media").await else {
        return;
    };
    let init = initialize(1).to_string();
    for content_type in [Some("text/plain"), None] {
        let answer = f.post(content_type, init.clone()).await;
        assert_eq!(answer.status, 415, "{content_type:?}: {}", answer.body);
        assert!(
            answer.content_type.starts_with("application/json"),
            "{}",
            answer.content_type
        );
        assert_error(
            &answer.json(),
            -32600,
            Value::Null,
            "unsupported_media_type",
        );
        assert!(answer.session.is_none());
    }
    f.stop().await;
}

/// A body over rmcp's bound (4 MiB): 413, with a JSON-RPC error body.
#[tokio::test]
async fn http_body_over_the_bound_is_413_with_a_json_rpc_error() {
    let Some(f) = http_front("malformed-http-large").await else {
        return;
    };
    let bound = rmcp::transport::streamable_http_server::StreamableHttpServerConfig::default()
        .max_request_body_bytes;
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":""#.to_vec();
    body.resize(bound + 1, b'x');
    body.extend_from_slice(br#""}}"#);
    let answer = f.post(Some("application/json"), body).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    assert!(
        answer.content_type.starts_with("application/json"),
        "{}",
        answer.content_type
    );
    assert_error(&answer.json(), -32600, Value::Null, "too_large");
    f.stop().await;
}

/// A notification that cannot be read is accepted unanswered (202, no body), as every
/// notification is: JSON-RPC 2.0 answers no notification.
#[tokio::test]
async fn http_unreadable_notification_is_accepted_unanswered() {
    let Some(f) = http_front("malformed-http-notification").await else {
        return;
    };
    let answer = f
        .post(
            Some("application/json"),
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#,
        )
        .await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    assert_eq!(answer.body, "");
    f.stop().await;
}

/// A session ended by DELETE is answered 200, which the official SDKs take as ended; the
/// session is gone after it.
#[tokio::test]
async fn http_delete_of_a_session_is_200() {
    let Some(f) = http_front("malformed-http-delete").await else {
        return;
    };
    let opened = f
        .post(Some("application/json"), initialize(1).to_string())
        .await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened.session.expect("a session id");
    let delete = |session: String| {
        f.http
            .delete(&f.proxy.url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION)
            .send()
    };
    let ended = delete(session.clone()).await.unwrap();
    assert_eq!(ended.status().as_u16(), 200);
    let again = delete(session).await.unwrap();
    assert_eq!(again.status().as_u16(), 404);
    f.stop().await;
}
