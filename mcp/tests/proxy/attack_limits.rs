//! Attacks on what the HTTP front holds: sessions (per principal, in all, unused ones),
//! upstream processes, connections (half-sent headers, stalled bodies, too many at once),
//! and another principal's session id. Each case runs the real proxy in front of the
//! counting server, and speaks raw HTTP to it (reqwest, or a bare socket where the request
//! is to be left half-sent). Every limit is set small in the case's `[limits]`; what each
//! waits for is observable state (a status, an answer, a socket's end, a process gone),
//! polled with generous bounds.

use crate::common::*;
use pg_idempotency_tests::until_async;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN_A: &str = "tenant-a-token-0123456789abcdef";
const TOKEN_B: &str = "tenant-b-token-0123456789abcdef";
const VERSION: &str = "2025-06-18";

/// The proxy in front of the counting server over stdio, two principals by bearer token,
/// and `limits` as the `[limits]` table.
struct Front {
    proxy: HttpProxy,
    counting: Counting,
    http: reqwest::Client,
}

async fn front(case: &str, limits: &str) -> Option<Front> {
    let (parts, python) = Parts::python_or_skip()?;
    let counting = Counting::new(&parts, &python, case);
    let name = pg_idempotency_tests::scope("limits");
    let rest = format!(
        "[front]\nclients = [{{ token = {}, principal = \"tenant-a\" }}, {{ token = {}, principal = \"tenant-b\" }}]\n\n[limits]\n{limits}\n\n{}",
        toml_str(TOKEN_A),
        toml_str(TOKEN_B),
        counting.upstream_stdio(&name)
    );
    let config = write_config(&counting.dir, &rest);
    let proxy = HttpProxy::start(&config, &counting.env()).await;
    Some(Front {
        proxy,
        counting,
        http: reqwest::Client::new(),
    })
}

/// What the front answered: status, headers, and the JSON-RPC messages of its body (an SSE
/// stream's `data:` lines, or a JSON body).
struct Answer {
    status: u16,
    session: Option<String>,
    retry_after: Option<String>,
    body: String,
}

impl Answer {
    async fn of(resp: reqwest::Response) -> Answer {
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let session = header("mcp-session-id");
        let retry_after = header("retry-after");
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        Answer {
            status,
            session,
            retry_after,
            body,
        }
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The JSON-RPC message answering request `id`, from an SSE stream.
    fn reply(&self, id: u64) -> Value {
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m["id"] == id)
            .unwrap_or(Value::Null)
    }
}

impl Front {
    fn post(&self, token: &str, session: Option<&str>, message: Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.proxy.url)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(s) = session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", VERSION);
        }
        req
    }

    async fn initialize(&self, token: &str) -> Answer {
        let message = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "attacker", "version": "1"}}});
        Answer::of(self.post(token, None, message).send().await.unwrap()).await
    }

    /// A session of `token`'s principal, its `initialize` answered: its id.
    async fn opened(&self, token: &str) -> String {
        let answer = self.initialize(token).await;
        assert_eq!(answer.status, 200, "initialize: {}", answer.body);
        assert!(
            answer.reply(0)["result"].is_object(),
            "initialize: {}",
            answer.body
        );
        answer.session.expect("a session id")
    }

    /// A session of `token`'s principal, initialized (`notifications/initialized` sent):
    /// its id.
    async fn session(&self, token: &str) -> String {
        let id = self.opened(token).await;
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let done = self.post(token, Some(&id), note).send().await.unwrap();
        assert_eq!(done.status().as_u16(), 202);
        id
    }

    /// A JSON-RPC request in a session.
    async fn request(
        &self,
        token: &str,
        session: &str,
        id: u64,
        method: &str,
        params: Value,
    ) -> Answer {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        Answer::of(
            self.post(token, Some(session), message)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    async fn delete(&self, token: &str, session: &str) -> Answer {
        let resp = self
            .http
            .delete(&self.proxy.url)
            .header("authorization", format!("Bearer {token}"))
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION)
            .send()
            .await
            .unwrap();
        Answer::of(resp).await
    }

    /// A GET of the session's standalone stream: only its status and body when it is not
    /// a stream (an open stream is not read).
    async fn get(&self, token: &str, session: &str) -> (u16, String) {
        let resp = self
            .http
            .get(&self.proxy.url)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", VERSION)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        if status == 200 {
            return (status, String::new());
        }
        (status, resp.text().await.unwrap_or_default())
    }

    /// The proxy's child processes still running (zombies count as gone).
    fn children(&self) -> Vec<u32> {
        let Some(parent) = self.proxy.child.id() else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
                continue;
            };
            let mut fields = rest.split_whitespace();
            let state = fields.next().unwrap_or("");
            let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(parent) && state != "Z" {
                found.push(pid);
            }
        }
        found.sort_unstable();
        found
    }

    async fn stop(mut self) {
        self.proxy.kill().await;
    }
}

fn ping(
    front: &Front,
    token: &str,
    session: &str,
    id: u64,
) -> impl std::future::Future<Output = Answer> {
    let message = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let req = front.post(token, Some(session), message);
    async move { Answer::of(req.send().await.unwrap()).await }
}

#[tokio::test]
async fn per_principal_session_cap_is_429_naming_the_limit() {
    let Some(f) = front(
        "limits-per-principal",
        "max_sessions_per_principal = 2\nmax_sessions = 10",
    )
    .await
    else {
        return;
    };
    let first = f.session(TOKEN_A).await;
    let _second = f.session(TOKEN_A).await;
    let third = f.initialize(TOKEN_A).await;
    assert_eq!(third.status, 429, "{}", third.body);
    assert!(third.retry_after.is_some(), "429 without Retry-After");
    assert_eq!(third.json()["error"], "limit_reached");
    assert_eq!(third.json()["limit"], "limits.max_sessions_per_principal");
    assert!(third.session.is_none());
    // Another principal is not starved by tenant-a's sessions.
    let _theirs = f.session(TOKEN_B).await;
    // A session ended gives its place back.
    assert_eq!(f.delete(TOKEN_A, &first).await.status, 200);
    let _again = f.session(TOKEN_A).await;
    f.stop().await;
}

#[tokio::test]
async fn global_session_cap_is_503_naming_the_limit() {
    let Some(f) = front(
        "limits-global",
        "max_sessions_per_principal = 5\nmax_sessions = 2",
    )
    .await
    else {
        return;
    };
    let _a = f.session(TOKEN_A).await;
    let _b = f.session(TOKEN_B).await;
    let over = f.initialize(TOKEN_A).await;
    assert_eq!(over.status, 503, "{}", over.body);
    assert_eq!(over.json()["error"], "limit_reached");
    assert_eq!(over.json()["limit"], "limits.max_sessions");
    assert!(over.session.is_none());
    f.stop().await;
}

/// Sessions that only initialized are ended after `idle_before_first_call`: their upstream
/// processes are gone and their ids unknown; a session that called a tool stays. Nothing
/// is asked of the unused sessions while waiting: a request would count as use.
#[tokio::test]
async fn unused_session_is_ended_after_its_idle_timeout() {
    let Some(f) = front("limits-unused", "idle_before_first_call = \"1s\"").await else {
        return;
    };
    // No `notifications/initialized` in this case (rmcp does not wait for it): on a loaded
    // machine the bound could pass before it is sent, and it would be answered 404.
    let unused = f.opened(TOKEN_A).await;
    // A session that calls a tool within the bound; on a loaded machine the bound may pass
    // first, and then another is tried.
    let mut used = None;
    for id in 1..=10 {
        let s = f.opened(TOKEN_A).await;
        let called = f
            .request(
                TOKEN_A,
                &s,
                id,
                "tools/call",
                json!({"name": "count_emails", "arguments": {}}),
            )
            .await;
        if called.reply(id)["result"].is_object() {
            used = Some(s);
            break;
        }
    }
    let used = used.expect("a session called a tool within its idle bound");
    // Opened after the used session's last request: once it has ended, the bound has
    // passed for the used session too.
    let later = f.opened(TOKEN_A).await;
    until(
        "only the used session's upstream process to be left",
        PATIENCE,
        || f.children().len() == 1,
    )
    .await;
    for id in [&unused, &later] {
        let gone = ping(&f, TOKEN_A, id, 20).await;
        assert_eq!(gone.status, 404, "{}", gone.body);
    }
    let alive = f
        .request(
            TOKEN_A,
            &used,
            21,
            "tools/call",
            json!({"name": "count_emails", "arguments": {}}),
        )
        .await;
    assert!(alive.reply(21)["result"].is_object(), "{}", alive.body);
    assert_eq!(f.children().len(), 1);
    f.stop().await;
}

/// Past `max_upstream_processes`, an `initialize` is answered with the limit's JSON-RPC
/// error and starts nothing; once a session ends, its process's slot is free again.
#[tokio::test]
async fn upstream_process_bound_refuses_clearly() {
    let Some(f) = front("limits-processes", "max_upstream_processes = 1").await else {
        return;
    };
    let first = f.session(TOKEN_A).await;
    assert_eq!(f.children().len(), 1);
    let refused = f.initialize(TOKEN_B).await;
    let error = &refused.reply(0)["error"];
    assert_eq!(error["code"], -32078, "{}", refused.body);
    assert_eq!(error["data"]["kind"], "limit_reached");
    assert_eq!(error["data"]["limit"], "limits.max_upstream_processes");
    assert!(error["data"]["hint"].is_string());
    assert_eq!(f.children().len(), 1, "no process started past the bound");
    assert_eq!(f.delete(TOKEN_A, &first).await.status, 200);
    until("the ended session's process to be gone", PATIENCE, || {
        f.children().is_empty()
    })
    .await;
    // The slot is given back once the process is gone (the transport is dropped just
    // after): polled, as that comes a moment later.
    until_async("an initialize to be served again", PATIENCE, || async {
        f.initialize(TOKEN_B).await.reply(0)["result"].is_object()
    })
    .await;
    f.stop().await;
}

/// Half-sent request headers: the server closes the connection after
/// `header_read_timeout` (the socket reads its end).
#[tokio::test]
async fn half_sent_headers_are_closed_after_header_read_timeout() {
    let Some(f) = front("limits-headers", "header_read_timeout = \"1s\"").await else {
        return;
    };
    let mut sockets = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(("127.0.0.1", f.proxy.port))
            .await
            .unwrap();
        s.write_all(format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\nContent-Type: appl").as_bytes())
            .await
            .unwrap();
        sockets.push(s);
    }
    for mut s in sockets {
        assert!(
            closed(&mut s).await,
            "a half-sent request was still open after {PATIENCE:?}"
        );
    }
    f.stop().await;
}

/// Headers in, then a body that stops coming: closed after `connection_idle_timeout`.
#[tokio::test]
async fn stalled_body_is_closed_after_connection_idle_timeout() {
    let Some(f) = front(
        "limits-idle-conn",
        "connection_idle_timeout = \"1s\"\nheader_read_timeout = \"60s\"",
    )
    .await
    else {
        return;
    };
    let mut s = TcpStream::connect(("127.0.0.1", f.proxy.port))
        .await
        .unwrap();
    s.write_all(format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 400\r\n\r\n{{\"jsonrpc\":").as_bytes())
        .await
        .unwrap();
    assert!(
        closed(&mut s).await,
        "a stalled body was still open after {PATIENCE:?}"
    );
    f.stop().await;
}

/// Reads until the peer ends the connection (or resets it); false if it is still open
/// after `PATIENCE`.
async fn closed(s: &mut TcpStream) -> bool {
    let mut sink = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut sink))
        .await
        .is_ok()
}

/// A bare request on a socket; the answer's head and what came with it.
async fn exchange(s: &mut TcpStream) -> String {
    s.write_all(format!("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN_A}\r\nAccept: text/event-stream\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(PATIENCE, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    // A refusal comes whole, then the end: what follows the head is read too.
    if got.starts_with(b"HTTP/1.1 503") {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest)).await;
        got.extend(rest);
    }
    String::from_utf8_lossy(&got).to_string()
}

/// `max_connections` open: the next connection is answered 503 naming the limit, and
/// closed; once one closes, a new one is served.
#[tokio::test]
async fn connection_cap_answers_503_naming_the_limit() {
    let Some(f) = front(
        "limits-connections",
        "max_connections = 2\nheader_read_timeout = \"120s\"\nconnection_idle_timeout = \"120s\"",
    )
    .await
    else {
        return;
    };
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(("127.0.0.1", f.proxy.port))
            .await
            .unwrap();
        let head = exchange(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 4"), "served: {head}");
        held.push(s);
    }
    let mut over = TcpStream::connect(("127.0.0.1", f.proxy.port))
        .await
        .unwrap();
    let refused = exchange(&mut over).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.contains("\"limit\":\"limits.max_connections\""),
        "{refused}"
    );
    drop(held.pop());
    until_async(
        "a connection to be served once one closed",
        PATIENCE,
        || async {
            let mut s = TcpStream::connect(("127.0.0.1", f.proxy.port))
                .await
                .unwrap();
            exchange(&mut s).await.starts_with("HTTP/1.1 4")
        },
    )
    .await;
    drop(held);
    f.stop().await;
}

/// tenant-b sends a request with tenant-a's session id: the same 404 as for an id that
/// does not exist, nothing runs in tenant-a's session, and it goes on working.
#[tokio::test]
async fn another_principals_session_id_is_404_on_post() {
    let Some(f) = front("limits-foreign-post", "").await else {
        return;
    };
    let victim = f.session(TOKEN_A).await;
    let call = json!({"name": "send_email", "arguments": {"to": "b@x", "subject": "from b"}});
    let stolen = f
        .request(TOKEN_B, &victim, 1, "tools/call", call.clone())
        .await;
    let unknown = f
        .request(TOKEN_B, "no-such-session", 1, "tools/call", call)
        .await;
    assert_eq!(stolen.status, 404, "{}", stolen.body);
    assert_eq!(
        (stolen.status, &stolen.body),
        (unknown.status, &unknown.body)
    );
    assert_eq!(f.counting.count("send_email"), 0, "nothing ran");
    let own = f
        .request(
            TOKEN_A,
            &victim,
            2,
            "tools/call",
            json!({"name": "send_email", "arguments": {"to": "a@x", "subject": "from a"}}),
        )
        .await;
    assert!(own.reply(2)["result"].is_object(), "{}", own.body);
    assert_eq!(f.counting.count("send_email"), 1);
    assert_eq!(f.counting.effects()[0]["to"], "a@x");
    f.stop().await;
}

#[tokio::test]
async fn another_principals_session_id_is_404_on_get() {
    let Some(f) = front("limits-foreign-get", "").await else {
        return;
    };
    let victim = f.session(TOKEN_A).await;
    let stolen = f.get(TOKEN_B, &victim).await;
    let unknown = f.get(TOKEN_B, "no-such-session").await;
    assert_eq!(stolen.0, 404, "{}", stolen.1);
    assert_eq!(stolen, unknown);
    assert_eq!(
        f.get(TOKEN_A, &victim).await.0,
        200,
        "the owner's stream opens"
    );
    f.stop().await;
}

#[tokio::test]
async fn another_principals_session_id_is_404_on_delete() {
    let Some(f) = front("limits-foreign-delete", "").await else {
        return;
    };
    let victim = f.session(TOKEN_A).await;
    let pids = f.children();
    let stolen = f.delete(TOKEN_B, &victim).await;
    let unknown = f.delete(TOKEN_B, "no-such-session").await;
    assert_eq!(stolen.status, 404, "{}", stolen.body);
    assert_eq!(
        (stolen.status, &stolen.body),
        (unknown.status, &unknown.body)
    );
    // The victim's session and its process are still there.
    let alive = ping(&f, TOKEN_A, &victim, 1).await;
    assert!(alive.reply(1)["result"].is_object(), "{}", alive.body);
    assert_eq!(f.children(), pids);
    // Its owner can end it: its process goes with it.
    assert_eq!(f.delete(TOKEN_A, &victim).await.status, 200);
    until("the ended session's process to be gone", PATIENCE, || {
        f.children().is_empty()
    })
    .await;
    assert_eq!(ping(&f, TOKEN_A, &victim, 2).await.status, 404);
    f.stop().await;
}
