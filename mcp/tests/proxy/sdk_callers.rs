//! The proxy with MCP parts we did not write, from the registries: the official TypeScript
//! SDK's client and Python SDK's client as callers (tests/mcp-parts/ts_client.mjs,
//! py_client.py), over stdio and Streamable HTTP; and the reference servers
//! `@modelcontextprotocol/server-memory` and `server-filesystem` behind it, whose write
//! tools' effects are counted where they act (the memory file, the files).

use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug)]
enum Caller {
    TypeScript,
    Python,
}

#[derive(Clone, Copy, Debug)]
enum Front {
    Stdio,
    Http,
}

/// Over HTTP the SDKs' clients authenticate as a deployed caller would: a bearer token of
/// `[[front.clients]]`, sent by the SDK on every request (`requestInit.headers` in
/// TypeScript, the httpx client's headers in Python).
const SDK_TOKEN: &str = "sdk-caller-token-0123456789abcdef";

/// The `[front]` table that gives the SDK callers their token.
fn token_front() -> String {
    format!("[front]\nclients = [{{ token = \"{SDK_TOKEN}\", principal = \"sdk\" }}]\n\n")
}

fn auth_header() -> String {
    format!("Authorization: Bearer {SDK_TOKEN}")
}

/// The caller's command: node with ts_client.mjs, or the venv's python with py_client.py;
/// None (recorded skipped) without the part.
fn caller_command(caller: Caller) -> Option<(Parts, Vec<String>)> {
    match caller {
        Caller::TypeScript => {
            let (parts, _) = Parts::node_or_skip()?;
            let script = parts.dir.join("ts_client.mjs").display().to_string();
            Some((parts, vec!["node".into(), script]))
        }
        Caller::Python => {
            let (parts, python) = Parts::python_or_skip()?;
            let script = parts.dir.join("py_client.py").display().to_string();
            Some((parts, vec![python.display().to_string(), script]))
        }
    }
}

/// Runs the caller with `calls` (one session) and returns its output lines as JSON.
async fn run_calls(
    caller: &[String],
    node_dir: Option<&Path>,
    to: &[String],
    headers: &[&str],
    calls: &[Value],
    dir: &Path,
    env: &[(String, String)],
) -> Vec<Value> {
    let (ok, lines, stderr) = try_calls(caller, node_dir, to, headers, calls, dir, env).await;
    assert!(ok, "the caller failed: {lines:?}\n{stderr}");
    lines
}

/// As `run_calls`, whether or not the caller's session survived: (exit 0, lines, stderr).
async fn try_calls(
    caller: &[String],
    node_dir: Option<&Path>,
    to: &[String],
    headers: &[&str],
    calls: &[Value],
    dir: &Path,
    env: &[(String, String)],
) -> (bool, Vec<Value>, String) {
    let file = dir.join(format!("{}.jsonl", pg_idempotency_tests::scope("calls")));
    let lines: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let mut cmd = tokio::process::Command::new(&caller[0]);
    cmd.args(&caller[1..]);
    for h in headers {
        cmd.arg("--header").arg(h);
    }
    cmd.arg("--calls").arg(&file);
    cmd.args(to);
    cmd.envs(env.iter().cloned());
    if let Some(d) = node_dir {
        cmd.env("MCP_NODE_DIR", d);
    }
    let out = cmd.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v.get("progress").is_none())
        .collect();
    (
        out.status.success(),
        lines,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn wire_mark(v: &Value) -> &Value {
    &v["_meta"]["pg-idempotency/call"]
}

fn wire_unmarked(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("pg-idempotency/call");
        if meta.is_empty() {
            v.as_object_mut().unwrap().remove("_meta");
        }
    }
    v
}

/// Where the caller reaches the proxy: its command line over stdio, or a proxy serving
/// HTTP (kept alive by the returned guard).
async fn front(
    front: Front,
    config: &Path,
    env: &[(String, String)],
) -> (Vec<String>, Option<HttpProxy>) {
    match front {
        Front::Stdio => (
            vec![
                "--stdio".into(),
                "--".into(),
                proxy_bin().into(),
                "--config".into(),
                config.display().to_string(),
            ],
            None,
        ),
        Front::Http => {
            let proxy = HttpProxy::start(config, env).await;
            (vec!["--http".into(), proxy.url.clone()], Some(proxy))
        }
    }
}

/// The counting server behind the proxy; three identical calls from an official SDK's
/// client, a key in `_meta` (and on HTTP, one in the Idempotency-Key header): one email.
async fn counting(caller: Caller, via: Front) {
    let Some((parts, command)) = caller_command(caller) else {
        return;
    };
    let Some((_, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, &format!("sdk-{caller:?}-{via:?}"));
    let name = pg_idempotency_tests::scope("mail");
    let auth = auth_header();
    let (front_table, headers): (String, Vec<&str>) = match via {
        Front::Stdio => (String::new(), vec![]),
        Front::Http => (token_front(), vec![auth.as_str()]),
    };
    let config = write_config(&c.dir, &format!("{front_table}{}", c.upstream_stdio(&name)));
    let (to, proxy) = front(via, &config, &c.env()).await;
    let send = json!({"tool": "send_email", "args": {"to": "a@x", "subject": "s"}, "meta": {"pg-idempotency/key": "sdk-1"}});
    let out = run_calls(
        &command,
        parts.node_dir.as_deref(),
        &to,
        &headers,
        &[send.clone(), send.clone(), send],
        &c.dir,
        &c.env(),
    )
    .await;
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(wire_mark(&out[0])["replayed"], false, "{out:?}");
    assert_eq!(wire_mark(&out[0])["key"], "sdk-1");
    for again in &out[1..] {
        assert_eq!(wire_mark(again)["replayed"], true, "{again}");
        assert_eq!(wire_unmarked(again), wire_unmarked(&out[0]));
    }
    assert_eq!(out[0]["structuredContent"]["sent"], 1);
    assert_eq!(c.count("send_email"), 1);
    if let Front::Http = via {
        // The header names the call when `_meta` does not.
        let plain = json!({"tool": "send_email", "args": {"to": "b@x", "subject": "s"}});
        let out = run_calls(
            &command,
            parts.node_dir.as_deref(),
            &to,
            &[auth.as_str(), "Idempotency-Key: hdr-1"],
            &[plain.clone(), plain],
            &c.dir,
            &c.env(),
        )
        .await;
        assert_eq!(wire_mark(&out[0])["key"], "hdr-1");
        assert_eq!(wire_mark(&out[1])["replayed"], true);
        assert_eq!(c.count("send_email"), 2);
    }
    drop(proxy);
}

#[tokio::test]
async fn typescript_sdk_over_stdio() {
    counting(Caller::TypeScript, Front::Stdio).await
}

#[tokio::test]
async fn typescript_sdk_over_http() {
    counting(Caller::TypeScript, Front::Http).await
}

#[tokio::test]
async fn python_sdk_over_stdio() {
    counting(Caller::Python, Front::Stdio).await
}

#[tokio::test]
async fn python_sdk_over_http() {
    counting(Caller::Python, Front::Http).await
}

/// The official Python SDK's client ends its HTTP session with a DELETE as it closes, and
/// takes only 200 or 204 as the session ended: anything else (rmcp answers 202) makes it
/// log "Session termination failed" on every close.
#[tokio::test]
async fn python_sdk_closes_its_http_session_without_a_warning() {
    let Some((parts, command)) = caller_command(Caller::Python) else {
        return;
    };
    let Some((_, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "sdk-python-close");
    let name = pg_idempotency_tests::scope("mail");
    let config = write_config(
        &c.dir,
        &format!("{}{}", token_front(), c.upstream_stdio(&name)),
    );
    let proxy = HttpProxy::start(&config, &c.env()).await;
    let send = json!({"tool": "send_email", "args": {"to": "a@x", "subject": "s"}, "meta": {"pg-idempotency/key": "close-1"}});
    let (ok, lines, stderr) = try_calls(
        &command,
        None,
        &["--http".into(), proxy.url.clone()],
        &[&auth_header()],
        &[send],
        &c.dir,
        &c.env(),
    )
    .await;
    assert!(ok, "the caller failed: {lines:?}\n{stderr}");
    assert_eq!(wire_mark(&lines[0])["replayed"], false, "{lines:?}");
    assert!(
        !stderr.contains("Session termination failed"),
        "the SDK did not take the DELETE's answer as the session ended:\n{stderr}"
    );
    drop(proxy);
}

fn node_bin_tool(bin: &Path, name: &str) -> String {
    bin.join(name).display().to_string()
}

/// server-memory behind the proxy: `create_entities` repeated by the TypeScript client
/// creates one entity and every repeat gets the first answer (the server alone answers a
/// repeat with an empty list); `read_graph` (readOnlyHint) passes.
#[tokio::test]
async fn server_memory_behind_the_proxy() {
    let Some((parts, node_bin)) = Parts::node_or_skip() else {
        return;
    };
    let Some((_, command)) = caller_command(Caller::TypeScript) else {
        return;
    };
    let dir = temp_dir("memory");
    let memory = dir.join("memory.jsonl");
    let name = pg_idempotency_tests::scope("memory");
    let rest = format!(
        "[upstream]\nname = {}\ncommand = {}\nenv = {{ MEMORY_FILE_PATH = {} }}\n",
        toml_str(&name),
        toml_str(&node_bin_tool(&node_bin, "mcp-server-memory")),
        toml_str(&memory.display().to_string())
    );
    let config = write_config(&dir, &rest);
    let (to, _proxy) = front(Front::Stdio, &config, &[]).await;
    let create = json!({"tool": "create_entities", "args": {"entities": [{"name": "ada", "entityType": "person", "observations": ["wrote the first program"]}]}});
    let observe = json!({"tool": "add_observations", "args": {"observations": [{"entityName": "ada", "contents": ["born 1815"]}]}});
    let read = json!({"tool": "read_graph", "args": {}});
    let out = run_calls(
        &command,
        parts.node_dir.as_deref(),
        &to,
        &[],
        &[create.clone(), create, observe.clone(), observe, read],
        &dir,
        &[],
    )
    .await;
    assert_eq!(out.len(), 5, "{out:?}");
    assert_eq!(wire_mark(&out[1])["replayed"], true);
    assert_eq!(
        wire_unmarked(&out[1]),
        wire_unmarked(&out[0]),
        "the first answer, not the server's empty one"
    );
    assert!(
        out[0].to_string().contains("wrote the first program"),
        "{}",
        out[0]
    );
    assert_eq!(wire_mark(&out[3])["replayed"], true);
    assert_eq!(wire_unmarked(&out[3]), wire_unmarked(&out[2]));
    assert!(out[2].to_string().contains("born 1815"), "{}", out[2]);
    assert!(wire_mark(&out[4]).is_null(), "a read passes: {}", out[4]);
    let lines: Vec<Value> = std::fs::read_to_string(&memory)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let entities: Vec<&Value> = lines.iter().filter(|l| l["type"] == "entity").collect();
    assert_eq!(entities.len(), 1, "{lines:?}");
    assert_eq!(
        entities[0]["observations"],
        json!(["wrote the first program", "born 1815"])
    );
}

/// server-filesystem behind the proxy, called by the Python client: an `edit_file` that
/// appends is applied once however often it is repeated (the server alone applies it each
/// time), and a `move_file` repeated gets its first success, not the server's "no such
/// file".
#[tokio::test]
async fn server_filesystem_behind_the_proxy() {
    let Some((parts, node_bin)) = Parts::node_or_skip() else {
        return;
    };
    let Some((_, command)) = caller_command(Caller::Python) else {
        return;
    };
    let dir = temp_dir("filesystem");
    let root = dir.join("files");
    std::fs::create_dir_all(&root).unwrap();
    // The server resolves symlinks in its allowed folder: give it the real path.
    let root: PathBuf = std::fs::canonicalize(&root).unwrap();
    let notes = root.join("notes.txt");
    std::fs::write(&notes, "hello\n").unwrap();
    std::fs::write(root.join("draft.txt"), "draft\n").unwrap();
    let name = pg_idempotency_tests::scope("files");
    let rest = format!(
        "[upstream]\nname = {}\ncommand = {}\nargs = [{}]\n",
        toml_str(&name),
        toml_str(&node_bin_tool(&node_bin, "mcp-server-filesystem")),
        toml_str(&root.display().to_string())
    );
    let config = write_config(&dir, &rest);
    let (to, _proxy) = front(Front::Stdio, &config, &[]).await;
    let edit = json!({"tool": "edit_file", "args": {"path": notes.display().to_string(), "edits": [{"oldText": "hello", "newText": "hello hello"}]}});
    let moved = json!({"tool": "move_file", "args": {"source": root.join("draft.txt").display().to_string(), "destination": root.join("final.txt").display().to_string()}});
    let out = run_calls(
        &command,
        parts.node_dir.as_deref(),
        &to,
        &[],
        &[edit.clone(), edit.clone(), edit, moved.clone(), moved],
        &dir,
        &[],
    )
    .await;
    assert_eq!(out.len(), 5, "{out:?}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello hello\n");
    for i in [1, 2] {
        assert_eq!(wire_mark(&out[i])["replayed"], true, "{}", out[i]);
        assert_eq!(wire_unmarked(&out[i]), wire_unmarked(&out[0]));
    }
    assert_ne!(out[3]["isError"], true, "{}", out[3]);
    assert_eq!(wire_mark(&out[4])["replayed"], true);
    assert_eq!(wire_unmarked(&out[4]), wire_unmarked(&out[3]));
    assert!(root.join("final.txt").exists() && !root.join("draft.txt").exists());
}

const RECONCILE: &str = "\n[tools.send_email]\nlease = \"2s\"\nwait = \"60s\"\non_unknown_outcome = { reconcile = { tool = \"find_email\", arguments = { message_id = \"/message_id\" } } }\n";

fn held_send(id: &str) -> Value {
    json!({"tool": "send_email", "args": {"to": "a@x", "subject": "s", "message_id": id, "hold": true}, "meta": {"pg-idempotency/key": id}})
}

/// The Python SDK's client over HTTP; the proxy it reached is killed mid-call; its retry
/// (a new session, the same key) reaches another replica, which reconciles: one email.
#[tokio::test]
async fn python_sdk_the_proxy_killed() {
    let Some((parts, command)) = caller_command(Caller::Python) else {
        return;
    };
    let Some((_, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "sdk-proxy-killed");
    let name = pg_idempotency_tests::scope("mail");
    let config = write_config(
        &c.dir,
        &format!("{}{}{RECONCILE}", token_front(), c.upstream_stdio(&name)),
    );
    let mut a = HttpProxy::start(&config, &c.env()).await;
    let b = HttpProxy::start(&config, &c.env()).await;
    let first = tokio::spawn({
        let (command, dir, env, url) = (command.clone(), c.dir.clone(), c.env(), a.url.clone());
        let node_dir = parts.node_dir.clone();
        async move {
            try_calls(
                &command,
                node_dir.as_deref(),
                &["--http".into(), url],
                &[&auth_header()],
                &[held_send("spk-1")],
                &dir,
                &env,
            )
            .await
        }
    });
    c.held("spk-1").await;
    a.kill().await;
    let (survived, _, _) = first.await.unwrap();
    assert!(!survived, "the caller's session died with the proxy");
    c.release();
    let out = run_calls(
        &command,
        parts.node_dir.as_deref(),
        &["--http".into(), b.url.clone()],
        &[&auth_header()],
        &[held_send("spk-1")],
        &c.dir,
        &c.env(),
    )
    .await;
    assert_eq!(wire_mark(&out[0])["replayed"], true, "{out:?}");
    assert_eq!(out[0]["structuredContent"]["found"], true, "{out:?}");
    assert_eq!(c.count("send_email"), 1, "{:#?}", c.effects());
}

/// The TypeScript SDK's client over stdio; the server behind the proxy is killed mid-call:
/// the caller is told the outcome is unknown, and its retry (a new proxy process, the same
/// key) reconciles: one email.
#[tokio::test]
async fn typescript_sdk_the_upstream_killed() {
    let Some((parts, command)) = caller_command(Caller::TypeScript) else {
        return;
    };
    let Some((_, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "sdk-upstream-killed");
    let name = pg_idempotency_tests::scope("mail");
    let config = write_config(&c.dir, &format!("{}{RECONCILE}", c.upstream_stdio(&name)));
    let (to, _) = front(Front::Stdio, &config, &c.env()).await;
    let first = tokio::spawn({
        let (command, dir, env, to) = (command.clone(), c.dir.clone(), c.env(), to.clone());
        let node_dir = parts.node_dir.clone();
        async move {
            try_calls(
                &command,
                node_dir.as_deref(),
                &to,
                &[],
                &[held_send("tuk-1")],
                &dir,
                &env,
            )
            .await
        }
    });
    c.held("tuk-1").await;
    let marker: Value =
        serde_json::from_str(&std::fs::read_to_string(c.hold.join("held-tuk-1")).unwrap()).unwrap();
    let killed = std::process::Command::new("kill")
        .arg("-9")
        .arg(marker["pid"].to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let (_, lines, stderr) = first.await.unwrap();
    assert_eq!(
        lines[0]["error"]["code"],
        pg_idempotency_mcp::answer::code::UPSTREAM_LOST,
        "{lines:?} {stderr}"
    );
    c.release();
    // The holder stopped beating: a retry is told when its lease lapses (-32071 with
    // retryAfterMs); the SDK's caller retries then, a few times at most.
    let mut out = Vec::new();
    for _ in 0..10 {
        out = run_calls(
            &command,
            parts.node_dir.as_deref(),
            &to,
            &[],
            &[held_send("tuk-1")],
            &c.dir,
            &c.env(),
        )
        .await;
        if out[0]["error"]["code"] != pg_idempotency_mcp::answer::code::IN_PROGRESS {
            break;
        }
        let ms = out[0]["error"]["data"]["retryAfterMs"].as_u64();
        let ms = ms.unwrap_or_else(|| panic!("in_progress without retryAfterMs: {out:?}"));
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    assert_eq!(wire_mark(&out[0])["replayed"], true, "{out:?}");
    assert_eq!(out[0]["structuredContent"]["found"], true);
    assert_eq!(c.count("send_email"), 1, "{:#?}", c.effects());
}

/// Both SDKs' clients over HTTP through a hop that loses the first answer: the retry with
/// the same key replays it. One email per key.
#[tokio::test]
async fn sdk_callers_the_answer_lost() {
    for caller in [Caller::Python, Caller::TypeScript] {
        let Some((parts, command)) = caller_command(caller) else {
            return;
        };
        let Some((_, python)) = Parts::python_or_skip() else {
            return;
        };
        let c = Counting::new(&parts, &python, &format!("sdk-lost-{caller:?}"));
        let name = pg_idempotency_tests::scope("mail");
        let config = write_config(
            &c.dir,
            &format!("{}{}", token_front(), c.upstream_stdio(&name)),
        );
        let proxy = HttpProxy::start(&config, &c.env()).await;
        let auth = auth_header();
        let lossy = crate::common::lossy::Lossy::start(proxy.port).await;
        let to = vec![
            "--http".to_string(),
            format!("http://127.0.0.1:{}/mcp", lossy.port),
            "--timeout".into(),
            "20".into(),
        ];
        let send = json!({"tool": "send_email", "args": {"to": "a@x", "subject": "s"}, "meta": {"pg-idempotency/key": "lost-1"}});
        let (_, lines, _) = try_calls(
            &command,
            parts.node_dir.as_deref(),
            &to,
            &[auth.as_str()],
            std::slice::from_ref(&send),
            &c.dir,
            &c.env(),
        )
        .await;
        assert!(
            lossy.lost.load(std::sync::atomic::Ordering::SeqCst),
            "{caller:?}: nothing was lost"
        );
        assert!(
            lines.first().is_none_or(|l| l.get("error").is_some()),
            "{caller:?} got the lost answer: {lines:?}"
        );
        let out = run_calls(
            &command,
            parts.node_dir.as_deref(),
            &to,
            &[auth.as_str()],
            &[send],
            &c.dir,
            &c.env(),
        )
        .await;
        assert_eq!(wire_mark(&out[0])["replayed"], true, "{caller:?}: {out:?}");
        assert_eq!(out[0]["structuredContent"]["sent"], 1);
        assert_eq!(c.count("send_email"), 1, "{caller:?}");
    }
}
