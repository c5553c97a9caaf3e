//! What the proxy's tests run: the proxy binary, in front of the counting server (ours,
//! written with the official Python SDK: tests/mcp-parts/counting_server.py) or the
//! reference servers from npm, against the database under test (`PGIDEM_DSN`, the
//! extension or the portable SQL). The parts come from scripts/mcp-parts.sh; a test whose
//! part is missing records itself skipped with the reason.

#![allow(dead_code)] // each test binary uses its own part of it

pub mod cut_store;
pub mod lossy;
pub mod raw_stdio;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pg_idempotency_tests::{skip, Skip};
#[allow(unused_imports)] // not every test binary polls
pub use pg_idempotency_tests::{until, PATIENCE};
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorData, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Map, Value};

/// Where scripts/mcp-parts.sh put the parts.
pub struct Parts {
    pub dir: PathBuf,
    pub python: Option<PathBuf>,
    pub node_bin: Option<PathBuf>,
    pub node_dir: Option<PathBuf>,
}

impl Parts {
    pub fn find() -> Parts {
        let root = pg_idempotency_tests::root();
        let out = std::process::Command::new("bash")
            .arg(root.join("scripts/mcp-parts.sh"))
            .arg("paths")
            .output()
            .expect("scripts/mcp-parts.sh paths runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let get = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Parts {
            dir: get("MCP_PARTS_DIR").unwrap_or_else(|| root.join("tests/mcp-parts")),
            python: get("MCP_PYTHON"),
            node_bin: get("MCP_NODE_BIN"),
            node_dir: get("MCP_NODE_DIR"),
        }
    }

    /// The Python SDK's interpreter, or the test is recorded skipped.
    pub fn python_or_skip() -> Option<(Parts, PathBuf)> {
        let parts = Parts::find();
        match parts.python.clone() {
            Some(p) => Some((parts, p)),
            None => {
                skip(Skip::Missing, "the MCP Python SDK is not installed (scripts/mcp-parts.sh installs it into target/mcp-venv; it needs python3 3.10 or later with venv)");
                None
            }
        }
    }

    /// The npm parts (the TypeScript SDK, the reference servers), or the test is skipped.
    pub fn node_or_skip() -> Option<(Parts, PathBuf)> {
        let parts = Parts::find();
        match parts.node_bin.clone() {
            Some(p) => Some((parts, p)),
            None => {
                skip(Skip::Missing, "the npm MCP parts are not installed (scripts/mcp-parts.sh installs them with npm ci; it needs node and npm)");
                None
            }
        }
    }
}

/// A folder of this test's own.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(pg_idempotency_tests::scope(&format!("pgidem-mcp-{name}")));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The counting server's effect log and hold folder.
pub struct Counting {
    pub dir: PathBuf,
    pub log: PathBuf,
    pub hold: PathBuf,
    pub script: PathBuf,
    pub python: PathBuf,
}

impl Counting {
    pub fn new(parts: &Parts, python: &Path, name: &str) -> Counting {
        let dir = temp_dir(name);
        let hold = dir.join("hold");
        std::fs::create_dir_all(&hold).unwrap();
        Counting {
            log: dir.join("effects.jsonl"),
            hold,
            script: parts.dir.join("counting_server.py"),
            python: python.to_path_buf(),
            dir,
        }
    }

    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("COUNTING_LOG".into(), self.log.display().to_string()),
            ("COUNTING_HOLD_DIR".into(), self.hold.display().to_string()),
        ]
    }

    /// The `[upstream]` table that starts it over stdio.
    pub fn upstream_stdio(&self, name: &str) -> String {
        format!(
            "[upstream]\nname = {}\ncommand = {}\nargs = [{}]\n",
            toml_str(name),
            toml_str(&self.python.display().to_string()),
            toml_str(&self.script.display().to_string())
        )
    }

    pub fn effects(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn count(&self, kind: &str) -> usize {
        self.effects().iter().filter(|e| e["kind"] == kind).count()
    }

    /// Waits until a held call announced itself.
    pub async fn held(&self, id: &str) {
        let marker = self.hold.join(format!("held-{id}"));
        until(&format!("the call {id} to be held"), PATIENCE, || {
            marker.exists()
        })
        .await;
    }

    pub fn release(&self) {
        std::fs::write(self.hold.join("release"), b"go").unwrap();
    }
}

pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A proxy configuration file: the database under test, then `rest`.
pub fn write_config(dir: &Path, rest: &str) -> PathBuf {
    let path = dir.join(format!("proxy-{}.toml", pg_idempotency_tests::scope("c")));
    let text = format!(
        "[database]\nurl = {}\npool_size = 4\n\n{rest}",
        toml_str(&pg_idempotency_tests::dsn())
    );
    std::fs::write(&path, text).unwrap();
    path
}

pub fn proxy_bin() -> &'static str {
    env!("CARGO_BIN_EXE_pg-idempotency-mcp")
}

pub type Client = RunningService<RoleClient, ()>;

/// An rmcp client that started the proxy over stdio (as an MCP host does).
pub async fn stdio_client(config: &Path, env: &[(String, String)]) -> Client {
    let mut cmd = tokio::process::Command::new(proxy_bin());
    cmd.arg("--config").arg(config);
    cmd.envs(env.iter().cloned());
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .expect("the proxy initializes over stdio")
}

/// The proxy serving Streamable HTTP, as a process of its own.
pub struct HttpProxy {
    pub child: tokio::process::Child,
    pub url: String,
    pub port: u16,
    /// How many duplicates the proxy's waiters' gate has let wait now (waiting inside
    /// `idem_begin` or joined to a holder in the proxy), as its log says.
    pub waiting: tokio::sync::watch::Receiver<usize>,
}

impl HttpProxy {
    pub async fn start(config: &Path, env: &[(String, String)]) -> HttpProxy {
        // Port 0: the proxy binds a port nobody holds, and says which. A port probed free
        // here and bound later can be taken in between by another test's proxy, whose
        // calls this test would then make.
        let mut cmd = tokio::process::Command::new(proxy_bin());
        cmd.arg("--config")
            .arg(config)
            .arg("--http")
            .arg("127.0.0.1:0")
            // The gate's count of waiting duplicates is logged at debug (waiters.rs).
            .env("PGIDEM_MCP_LOG", "info,pg_idempotency_mcp::waiters=debug")
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let (count, waiting) = tokio::sync::watch::channel(0);
        let port = bound_port(child.stderr.take().unwrap(), count).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        HttpProxy {
            child,
            url,
            port,
            waiting,
        }
    }

    pub async fn client(&self) -> Client {
        http_client(&self.url, &[]).await
    }

    pub async fn kill(&mut self) {
        self.child.kill().await.unwrap();
    }
}

pub async fn http_client(url: &str, headers: &[(&str, &str)]) -> Client {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut custom = std::collections::HashMap::new();
    for (k, v) in headers {
        custom.insert(
            http::HeaderName::try_from(*k).unwrap(),
            http::HeaderValue::try_from(*v).unwrap(),
        );
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(custom);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("the proxy initializes over HTTP")
}

/// The port in the proxy's "serving MCP over Streamable HTTP" log line; the rest of its
/// log is passed on to the test's, and the gate's count of waiting duplicates to `waiting`.
async fn bound_port(
    stderr: tokio::process::ChildStderr,
    waiting: tokio::sync::watch::Sender<usize>,
) -> u16 {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            if let Some(n) = waiting_in(&line) {
                waiting.send_replace(n);
            }
            if line.contains("serving MCP over Streamable HTTP") {
                if let (Some(port), Some(tx)) = (port_in(&line), tx.take()) {
                    let _ = tx.send(port);
                }
            }
        }
    });
    tokio::time::timeout(Duration::from_secs(60), rx)
        .await
        .expect("waited a minute for the proxy to listen")
        .expect("the proxy ended before it listened")
}

/// The count in a line of the waiters' gate (`waiting=N`), its colours taken out.
fn waiting_in(line: &str) -> Option<usize> {
    if !line.contains("pg_idempotency_mcp::waiters") {
        return None;
    }
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            // An escape sequence: `ESC [` then parameters up to a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(ch);
        }
    }
    let at = plain.find("waiting=")? + "waiting=".len();
    let digits: String = plain[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The port after `127.0.0.1:` in a log line (its colours around it).
fn port_in(line: &str) -> Option<u16> {
    let at = line.find("127.0.0.1:")? + "127.0.0.1:".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `tools/call`'s params: the tool, its arguments, and `_meta` if any.
pub fn params(tool: &str, args: Value, meta: Option<Value>) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(tool.to_string());
    p.arguments = args.as_object().cloned();
    if let Some(Value::Object(m)) = meta {
        p.meta = Some(RequestMetaObject::from(m));
    }
    p
}

/// Calls a tool; a JSON-RPC error comes back as `Err`.
pub async fn call<S: rmcp::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    tool: &str,
    args: Value,
    meta: Option<Value>,
) -> Result<CallToolResult, ErrorData> {
    match client.call_tool(params(tool, args, meta)).await {
        Ok(r) => Ok(r),
        Err(rmcp::ServiceError::McpError(e)) => Err(e),
        Err(other) => panic!("the call did not get an answer: {other}"),
    }
}

/// How long a duplicate of a call whose holder stopped beating is told to wait, from an
/// `in_progress` answer (-32071): its `retryAfterMs`, which must be there.
pub fn retry_after_of(e: &ErrorData) -> Duration {
    let ms = e
        .data
        .as_ref()
        .and_then(|d| d["retryAfterMs"].as_u64())
        .unwrap_or_else(|| panic!("an in_progress answer without retryAfterMs: {e:?}"));
    Duration::from_millis(ms)
}

/// Calls a tool as an agent that does what it is told: an `in_progress` answer is retried
/// after its `retryAfterMs` (a holder that stopped beating: when its lease lapses), a few
/// times at most; answers the first other answer.
pub async fn call_as_told<S: rmcp::Service<RoleClient>>(
    client: &RunningService<RoleClient, S>,
    tool: &str,
    args: Value,
    meta: Option<Value>,
) -> Result<CallToolResult, ErrorData> {
    for _ in 0..10 {
        match call(client, tool, args.clone(), meta.clone()).await {
            Err(e) if e.code.0 == pg_idempotency_mcp::answer::code::IN_PROGRESS => {
                tokio::time::sleep(retry_after_of(&e)).await;
            }
            other => return other,
        }
    }
    panic!("{tool} stayed in progress through 10 retries, each after its retryAfterMs");
}

/// The proxy's mark on a result.
pub fn mark(r: &CallToolResult) -> Value {
    r.meta
        .as_ref()
        .and_then(|m| m.0.get("pg-idempotency/call").cloned())
        .unwrap_or(Value::Null)
}

/// The result without the proxy's mark: what the upstream answered.
pub fn unmarked(r: &CallToolResult) -> Value {
    let mut v = serde_json::to_value(r).unwrap();
    if let Some(meta) = v.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("pg-idempotency/call");
        if meta.is_empty() {
            v.as_object_mut().unwrap().remove("_meta");
        }
    }
    v
}

pub fn key_meta(key: &str) -> Option<Value> {
    Some(json!({"pg-idempotency/key": key}))
}

pub fn structured(r: &CallToolResult) -> Map<String, Value> {
    r.structured_content
        .clone()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}
