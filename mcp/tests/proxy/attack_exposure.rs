//! What a tenant is told when something behind the proxy fails: a stable code, a kind and
//! a hint, never the database's error text, the upstream server's command or URL, or a
//! stored request's fingerprint (which tells about other requests). The operator's log has
//! those.

use std::process::Stdio;

use crate::common::*;
use rmcp::model::ErrorData;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The texts a tenant reads in an error: its message, and data's detail and hint.
fn told(e: &ErrorData) -> String {
    let data = e.data.clone().unwrap_or(Value::Null);
    format!(
        "{} | {} | {}",
        e.message,
        data["detail"].as_str().unwrap_or(""),
        data["hint"].as_str().unwrap_or("")
    )
}

/// A run of at least `n` hex digits (a fingerprint, `\x` and 64 of them, or a part of one).
fn hex_run(text: &str, n: usize) -> bool {
    let mut run = 0;
    for c in text.chars() {
        run = if c.is_ascii_hexdigit() { run + 1 } else { 0 };
        if run >= n {
            return true;
        }
    }
    false
}

/// The store goes away under a running proxy (its database is dropped): the call is
/// refused with -32075 and a hint, without the database's text or name.
#[tokio::test]
async fn store_down_is_32075_without_database_text() {
    if pg_idempotency_tests::skip_through_pooler(
        "it drops and re-creates a database of its own, an operator's work for a direct \
         connection: PgBouncer lends server connections the DROP ... WITH (FORCE) closed",
    ) {
        return;
    }
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-store-down");
    // A database of this test's own, with the backend under test (made and dropped off
    // the runtime: the suite's helpers block). A failed run's is dropped by the next one.
    let tag = match pg_idempotency_tests::backend() {
        pg_idempotency_tests::Backend::Extension => "ext",
        pg_idempotency_tests::Backend::Portable => "por",
    };
    let db_name = format!("pidem_mcp_store_down_{tag}");
    let made = db_name.clone();
    let dsn = tokio::task::spawn_blocking(move || {
        let dsn = pg_idempotency_tests::fresh_database(&made);
        pg_idempotency_tests::install(&dsn);
        dsn
    })
    .await
    .unwrap();
    let server = pg_idempotency_tests::scope("mail");
    let config = c.dir.join("store-down.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {}\npool_size = 2\n\n{}",
            toml_str(&dsn),
            c.upstream_stdio(&server)
        ),
    )
    .unwrap();
    let client = stdio_client(&config, &c.env()).await;
    // Up: a call runs.
    let ok = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "up"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(mark(&ok)["replayed"], false);
    let name = db_name.clone();
    tokio::task::spawn_blocking(move || pg_idempotency_tests::drop_database(&name))
        .await
        .unwrap();
    let down = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "down"}),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(
        down.code.0,
        pg_idempotency_mcp::answer::code::STORE_UNAVAILABLE,
        "{down:?}"
    );
    let data = down.data.clone().unwrap_or(Value::Null);
    assert_eq!(data["kind"], "store_unavailable");
    assert!(data["hint"].is_string(), "{down:?}");
    let text = serde_json::to_string(&down).unwrap();
    for leak in [
        db_name.as_str(),
        "FATAL",
        "does not exist",
        "db error",
        "connection",
        "postgres",
        "socket",
    ] {
        assert!(
            !text.to_lowercase().contains(&leak.to_lowercase()),
            "the tenant is told {leak:?}: {text}"
        );
    }
    assert_eq!(c.count("send_email"), 1, "the call was not sent upstream");
    client.cancel().await.unwrap();
}

/// `initialize` over raw stdio (an rmcp client would only report that it failed): the
/// proxy's one line of answer.
async fn initialize_answer(config: &std::path::Path) -> Value {
    let mut child = tokio::process::Command::new(proxy_bin())
        .arg("--config")
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "exposure-test", "version": "1"}}});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    stdin.flush().await.unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .next_line()
        .await
        .unwrap()
        .expect("the proxy answers initialize");
    let _ = child.kill().await;
    serde_json::from_str(&line).unwrap()
}

fn assert_unreachable_without(answer: &Value, secrets: &[&str]) {
    let error = &answer["error"];
    assert_eq!(
        error["message"], "the upstream MCP server cannot be reached",
        "{answer}"
    );
    assert_eq!(error["data"]["kind"], "upstream_unreachable", "{answer}");
    assert!(error["data"]["hint"].is_string(), "{answer}");
    let text = answer.to_string();
    for s in secrets {
        assert!(!text.contains(s), "the tenant is told {s:?}: {text}");
    }
}

/// An upstream command that cannot start: the tenant is not told the command, its path or
/// the OS error.
#[tokio::test]
async fn unreachable_upstream_command_is_not_shown() {
    let dir = temp_dir("atk-upstream-cmd");
    let config = write_config(
        &dir,
        "[upstream]\nname = \"mail\"\ncommand = \"/opt/secret-tools/mcp-mail-server\"\nargs = [\"--token-file\", \"/etc/secret-token\"]\n",
    );
    let answer = initialize_answer(&config).await;
    assert_unreachable_without(
        &answer,
        &[
            "secret-tools",
            "mcp-mail-server",
            "secret-token",
            "No such file",
            "os error",
        ],
    );
}

/// An upstream URL nobody answers on: the tenant is not told the URL or the OS error.
#[tokio::test]
async fn unreachable_upstream_url_is_not_shown() {
    let dir = temp_dir("atk-upstream-url");
    let port = free_port();
    let config = write_config(
        &dir,
        &format!(
            "[upstream]\nname = \"mail\"\nurl = \"http://127.0.0.1:{port}/internal-secret/mcp\"\n"
        ),
    );
    let answer = initialize_answer(&config).await;
    assert_unreachable_without(
        &answer,
        &[
            "internal-secret",
            &port.to_string(),
            "127.0.0.1",
            "refused",
            "os error",
        ],
    );
}

/// The same key with other arguments: -32072 says so, and shows no fingerprint (of the
/// stored request or of this one).
#[tokio::test]
async fn key_reused_shows_no_fingerprint() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-fingerprint");
    let server = pg_idempotency_tests::scope("mail");
    let config = write_config(&c.dir, &c.upstream_stdio(&server));
    let client = stdio_client(&config, &c.env()).await;
    call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "first"}),
        key_meta("fp-1"),
    )
    .await
    .unwrap();
    let reused = call(
        &client,
        "send_email",
        json!({"to": "eve@x", "subject": "other"}),
        key_meta("fp-1"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        reused.code.0,
        pg_idempotency_mcp::answer::code::KEY_REUSED,
        "{reused:?}"
    );
    let data = reused.data.clone().unwrap_or(Value::Null);
    assert_eq!(data["kind"], "key_reused");
    let text = told(&reused);
    assert!(text.contains("other arguments"), "{text}");
    assert!(
        !hex_run(&text, 16) && !text.contains("\\x") && !text.contains("fingerprint"),
        "the tenant is told a fingerprint: {text}"
    );
    assert_eq!(c.count("send_email"), 1);
    client.cancel().await.unwrap();
}
