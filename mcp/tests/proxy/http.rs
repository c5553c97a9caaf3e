//! The proxy over Streamable HTTP, in front and behind: the `Idempotency-Key` header,
//! bearer tokens naming principals, a counting server reached over HTTP; and what a
//! cancelled call and an oversized result do to the record.

use crate::common::*;
use rmcp::model::{CallToolRequest, ClientRequest};
use serde_json::json;

const TOKEN_A: &str = "tenant-a-token-0123456789abcdef";
const TOKEN_B: &str = "tenant-b-token-0123456789abcdef";

/// The header names the call; each bearer token's principal has its own calls; a request
/// without a token the proxy knows is refused before MCP.
#[tokio::test]
async fn header_key_and_bearer_principals() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "http-front");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "[front]\nclients = [{{ token = \"{TOKEN_A}\", principal = \"tenant-a\" }}, {{ token_env = \"TENANT_B_TOKEN\", principal = \"tenant-b\" }}]\n\n{}",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let mut env = c.env();
    env.push(("TENANT_B_TOKEN".into(), TOKEN_B.into()));
    let mut proxy = HttpProxy::start(&config, &env).await;
    let args = json!({"to": "a@x", "subject": "s"});
    let a = http_client(
        &proxy.url,
        &[
            ("authorization", &format!("Bearer {TOKEN_A}")),
            ("idempotency-key", "h-1"),
        ],
    )
    .await;
    let first = call(&a, "send_email", args.clone(), None).await.unwrap();
    assert_eq!(mark(&first)["key"], "h-1");
    assert_eq!(
        mark(&first)["scope"],
        pg_idempotency_mcp::scope::scope_of(&name, "send_email", "tenant-a")
    );
    // Another session of the same principal, the same header: a replay, though the
    // arguments' hash would be the same too, the key is the header's.
    let a2 = http_client(
        &proxy.url,
        &[
            ("authorization", &format!("Bearer {TOKEN_A}")),
            ("idempotency-key", "h-1"),
        ],
    )
    .await;
    let again = call(&a2, "send_email", args.clone(), None).await.unwrap();
    assert_eq!(mark(&again)["replayed"], true);
    assert_eq!(unmarked(&again), unmarked(&first));
    // The same header from another principal: another call.
    let b = http_client(
        &proxy.url,
        &[
            ("authorization", &format!("Bearer {TOKEN_B}")),
            ("idempotency-key", "h-1"),
        ],
    )
    .await;
    let theirs = call(&b, "send_email", args.clone(), None).await.unwrap();
    assert_eq!(mark(&theirs)["replayed"], false);
    assert_eq!(
        mark(&theirs)["scope"],
        pg_idempotency_mcp::scope::scope_of(&name, "send_email", "tenant-b")
    );
    assert_eq!(c.count("send_email"), 2);
    // A `_meta` key goes over the header.
    let meta = call(&a, "send_email", args.clone(), key_meta("m-1"))
        .await
        .unwrap();
    assert_eq!(mark(&meta)["key"], "m-1");
    assert_eq!(c.count("send_email"), 3);
    // No token, or a wrong one: 401 with a Bearer challenge (RFC 6750: the bare challenge
    // without a credential, `invalid_token` for a wrong one).
    let http = reqwest::Client::new();
    for (auth, challenge) in [
        (None, "Bearer"),
        (Some("Bearer nope"), "Bearer error=\"invalid_token\""),
    ] {
        let mut req = http
            .post(&proxy.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401);
        assert_eq!(resp.headers()["www-authenticate"], challenge);
    }
    for client in [a, a2, b] {
        client.cancel().await.unwrap();
    }
    proxy.kill().await;
}

/// The upstream server reached over Streamable HTTP.
#[tokio::test]
async fn an_upstream_over_http() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "http-upstream");
    let port = free_port();
    let mut server = tokio::process::Command::new(&c.python)
        .arg(&c.script)
        .arg("--http")
        .arg(port.to_string())
        .envs(c.env())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until("the counting server to listen", PATIENCE, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "[upstream]\nname = {}\nurl = \"http://127.0.0.1:{port}/mcp\"\n",
        toml_str(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &[]).await;
    let args = json!({"to": "a@x", "subject": "over http"});
    let first = call(&client, "send_email", args.clone(), None)
        .await
        .unwrap();
    let again = call(&client, "send_email", args, None).await.unwrap();
    assert_eq!(mark(&again)["replayed"], true);
    assert_eq!(unmarked(&again), unmarked(&first));
    assert_eq!(c.count("send_email"), 1);
    // The server saw the call's stable key in _meta.
    assert_eq!(
        c.effects()[0]["meta"]["pg-idempotency/upstream"]["key"],
        mark(&first)["key"]
    );
    client.cancel().await.unwrap();
    server.kill().await.unwrap();
}

/// A call the client cancels before the server answered: the server is told, the claim is
/// released (the record is gone), and a retry with the same key runs.
#[tokio::test]
async fn a_cancelled_call_releases_its_claim() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "cancel");
    let name = pg_idempotency_tests::scope("mail");
    // Failures are kept: a cancellation is not one, and must leave no record.
    let rest = format!(
        "{}\n[tools.send_email]\ncache_failures = true\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    let scope = pg_idempotency_mcp::scope::scope_of(&name, "send_email", "local");
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let slow = json!({"to": "a@x", "subject": "s", "slow_ms": 60000});
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(
        "send_email",
        slow.clone(),
        key_meta("c-1"),
    )));
    let handle = client
        .peer()
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    // Claimed, in progress upstream.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while state(&db, &scope).await.as_deref() != Some("in_progress") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call was never claimed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    handle
        .cancel(Some("the user changed their mind".into()))
        .await
        .unwrap();
    while state(&db, &scope).await.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancelled call's claim was never released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        c.count("send_email"),
        0,
        "the server stopped before its effect"
    );
    let retry = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s"}),
        key_meta("c-2"),
    )
    .await
    .unwrap();
    assert_eq!(mark(&retry)["replayed"], false);
    client.cancel().await.unwrap();
}

/// A result over the bound reaches the first caller; then `oversize = "mark"` tells every
/// retry the effect happened, and `"release"` lets a retry run again.
#[tokio::test]
async fn an_oversized_result() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "oversize");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "{}\n[tools.send_email]\nmax_result_bytes = 10\n\n[tools.reject]\nmax_result_bytes = 10\noversize = \"release\"\ncache_failures = true\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    let args = json!({"to": "a@x", "subject": "big"});
    let first = call(&client, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(
        structured(&first)["sent"],
        1,
        "the first caller gets the server's result"
    );
    let retry = call(&client, "send_email", args, None).await.unwrap_err();
    assert_eq!(
        retry.code.0,
        pg_idempotency_mcp::answer::code::UNRECORDED,
        "{retry:?}"
    );
    assert_eq!(c.count("send_email"), 1);
    for _ in 0..2 {
        let r = call(&client, "reject", json!({"reason": "a long reason"}), None)
            .await
            .unwrap();
        assert_eq!(r.is_error, Some(true));
        assert_eq!(mark(&r)["replayed"], false);
    }
    assert_eq!(c.count("reject"), 2, "released: each repeat ran");
    client.cancel().await.unwrap();
}

/// The state of the record of key c-1, if there is one.
async fn state(db: &tokio_postgres::Client, scope: &str) -> Option<String> {
    // Unnamed (query_typed): the suite runs through a pooler in transaction mode too.
    db.query_typed(
        "SELECT state::text FROM idem_lookup($1, 'c-1')",
        &[(&scope, tokio_postgres::types::Type::TEXT)],
    )
    .await
    .unwrap()
    .first()
    .map(|r| r.get::<_, String>(0))
}
