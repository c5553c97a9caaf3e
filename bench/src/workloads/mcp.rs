//! The MCP proxy's cost per `tools/call`: an rmcp client calls `send_email` of the
//! counting server (tests/mcp-parts/counting_server.py, the official Python SDK; one
//! fsync'd log line per call) directly, and the same through `pg-idempotency-mcp` (the
//! real binary, found next to this benchmark's executable), alternately in the same run:
//!
//! - over stdio: the client starts the server, or the proxy, which starts the server;
//! - over Streamable HTTP: the server listens on 127.0.0.1, or the proxy listens and
//!   reaches that same server over HTTP.
//!
//! Through the proxy, a call is either new (other arguments each time: the key comes
//! from them, the proxy's default) and goes on to the server between its claim and its
//! completion, or a replay of an answered call, which the server does not see. Each
//! database given (the extension's, the portable variant's) has a proxy of its own.
//!
//! One client, calls one after another: a warm-up, then the measured calls in rounds,
//! direct and proxied alternating. Before each call (outside its timing) the server's
//! effect log is emptied: the counting server counts the log's lines on every effect,
//! which would make each call slower than the one before, and this is test scaffolding,
//! not a server's cost.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use crate::harness::{fresh_key, stats, BenchResult, Stats};

/// How many calls.
#[derive(Debug, Clone, Copy)]
pub struct McpPlan {
    /// Calls of each side before the measurement.
    pub warmup: usize,
    /// Measured calls of each side, in `rounds` alternating rounds.
    pub calls: usize,
    pub rounds: usize,
    /// Answered calls the replay rows cycle through.
    pub replay_keys: usize,
}

/// One line of the section: proxied calls beside direct ones over the same transport.
pub struct McpRow {
    pub transport: &'static str,
    pub ours_name: String,
    pub ours: Stats,
    pub baseline: Stats,
}

impl McpRow {
    /// Direct / proxied in mean time per call: above 1 is faster than the direct call.
    pub fn ratio(&self) -> f64 {
        let (o, b) = (self.ours.ops_per_sec(), self.baseline.ops_per_sec());
        if b > 0.0 {
            o / b
        } else {
            0.0
        }
    }
}

pub enum Outcome {
    Skipped(String),
    Measured { python: String, rows: Vec<McpRow> },
}

type Client = RunningService<RoleClient, ()>;

/// Where scripts/mcp-parts.sh put the Python SDK and the counting server: `MCP_PYTHON` and
/// `MCP_PARTS_DIR` when set (scripts/bench.sh sets them), else what the script prints.
pub(crate) fn parts() -> Result<(PathBuf, PathBuf), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (mut python, mut dir) = (
        std::env::var("MCP_PYTHON").ok(),
        std::env::var("MCP_PARTS_DIR").ok(),
    );
    if python.is_none() || dir.is_none() {
        let out = std::process::Command::new("bash")
            .arg(root.join("scripts/mcp-parts.sh"))
            .arg("paths")
            .output()
            .map_err(|e| format!("scripts/mcp-parts.sh paths did not run: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let get = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(str::to_string)
        };
        python = python.or_else(|| get("MCP_PYTHON"));
        dir = dir.or_else(|| get("MCP_PARTS_DIR"));
    }
    match python.filter(|p| !p.is_empty()) {
        Some(p) => Ok((
            PathBuf::from(p),
            dir.filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("tests/mcp-parts")),
        )),
        None => Err("the MCP Python SDK is not installed (scripts/mcp-parts.sh installs it into target/mcp-venv; it needs python3 3.10 or later with venv)".into()),
    }
}

/// The proxy binary the workspace built beside this benchmark.
pub(crate) fn proxy_bin() -> BenchResult<PathBuf> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .ok_or("the benchmark's executable has no folder")?
        .join("pg-idempotency-mcp");
    if !bin.is_file() {
        return Err(format!(
            "{} is missing: build the proxy with the same profile first (cargo build [--release] -p pg_idempotency_mcp)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

pub(crate) fn free_port() -> BenchResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(crate) fn toml_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// A process's stderr, kept in a file of the run's folder.
pub(crate) fn log_file(dir: &Path, name: &str) -> BenchResult<Stdio> {
    Ok(std::fs::File::create(dir.join(format!("{name}.stderr")))?.into())
}

pub(crate) async fn wait_listening(what: &str, port: u16) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(
                format!("{what} did not listen on 127.0.0.1:{port} within a minute").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The port of the proxy's "serving MCP over Streamable HTTP" line in its log file.
pub(crate) async fn bound_port(log: &Path) -> BenchResult<u16> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(port) = text
            .lines()
            .filter(|l| l.contains("serving MCP over Streamable HTTP"))
            .find_map(port_in)
        {
            return Ok(port);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the proxy did not say it listens within a minute (its log: {})",
                log.display()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The port after `127.0.0.1:` in a log line (colours, if any, around it).
fn port_in(line: &str) -> Option<u16> {
    let at = line.find("127.0.0.1:")? + "127.0.0.1:".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The last lines of each process's log kept in `dir`, for the error a run ends with.
pub(crate) fn print_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut logs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "stderr"))
        .collect();
    logs.sort();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(20)..];
        eprintln!("mcp: {} (last {} lines):", log.display(), tail.len());
        for line in tail {
            eprintln!("    {line}");
        }
    }
}

async fn http_client(url: &str) -> BenchResult<Client> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
    Ok(
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await?,
    )
}

async fn stdio_client(cmd: tokio::process::Command, stderr: Stdio) -> BenchResult<Client> {
    let (transport, _) = TokioChildProcess::builder(cmd).stderr(stderr).spawn()?;
    Ok(().serve(transport).await?)
}

/// What the run starts: the processes (killed when dropped) and their folder.
struct Run {
    dir: PathBuf,
    python: PathBuf,
    script: PathBuf,
    proxy: PathBuf,
    children: Vec<tokio::process::Child>,
    n: usize,
}

/// One endpoint the client calls: a server directly, or a proxy; and the effect log of the
/// server that acts.
struct Endpoint {
    client: Client,
    log: PathBuf,
}

impl Run {
    fn next(&mut self, what: &str) -> String {
        self.n += 1;
        format!("{what}-{}", self.n)
    }

    /// A new file of the run's folder.
    fn file(&mut self, what: &str, ext: &str) -> PathBuf {
        let name = self.next(what);
        self.dir.join(format!("{name}.{ext}"))
    }

    fn server_cmd(&self, log: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.python);
        cmd.arg(&self.script)
            .env("COUNTING_LOG", log)
            .kill_on_drop(true);
        cmd
    }

    /// The counting server on a port of its own; its port.
    async fn http_server(&mut self, log: &Path) -> BenchResult<u16> {
        let name = self.next("server-http");
        let port = free_port()?;
        let mut cmd = self.server_cmd(log);
        cmd.arg("--http")
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, &name)?);
        self.children.push(cmd.spawn()?);
        wait_listening("the counting server", port).await?;
        Ok(port)
    }

    /// A proxy configuration: the database, an upstream of its own name, and `upstream`.
    fn config(&mut self, dsn: &str, upstream: &str) -> BenchResult<PathBuf> {
        let path = self.file("proxy", "toml");
        let text = format!(
            "[database]\nurl = {}\npool_size = 4\n\n[upstream]\nname = {}\n{upstream}",
            toml_str(dsn),
            toml_str(&fresh_key("bench-mail")),
        );
        std::fs::write(&path, text)?;
        Ok(path)
    }

    async fn direct_stdio(&mut self) -> BenchResult<Endpoint> {
        let log = self.file("effects", "jsonl");
        let name = self.next("server-stdio");
        let client = stdio_client(self.server_cmd(&log), log_file(&self.dir, &name)?).await?;
        Ok(Endpoint { client, log })
    }

    async fn proxy_stdio(&mut self, dsn: &str) -> BenchResult<Endpoint> {
        let log = self.file("effects", "jsonl");
        let upstream = format!(
            "command = {}\nargs = [{}]\n",
            toml_str(&self.python.display().to_string()),
            toml_str(&self.script.display().to_string())
        );
        let config = self.config(dsn, &upstream)?;
        let mut cmd = tokio::process::Command::new(&self.proxy);
        cmd.arg("--config")
            .arg(&config)
            .env("COUNTING_LOG", &log)
            .kill_on_drop(true);
        let name = self.next("proxy-stdio");
        let client = stdio_client(cmd, log_file(&self.dir, &name)?).await?;
        Ok(Endpoint { client, log })
    }

    /// The counting server over HTTP, called directly; its port, for the proxies.
    async fn direct_http(&mut self) -> BenchResult<(Endpoint, u16)> {
        let log = self.file("effects", "jsonl");
        let port = self.http_server(&log).await?;
        let client = http_client(&format!("http://127.0.0.1:{port}/mcp")).await?;
        Ok((Endpoint { client, log }, port))
    }

    /// A proxy over HTTP in front of the server the direct calls reach (one process, one
    /// effect log: the calls are one after another).
    async fn proxy_http(
        &mut self,
        dsn: &str,
        upstream: &Endpoint,
        upstream_port: u16,
    ) -> BenchResult<Endpoint> {
        let log = upstream.log.clone();
        let config = self.config(
            dsn,
            &format!("url = \"http://127.0.0.1:{upstream_port}/mcp\"\n"),
        )?;
        // Port 0: the proxy binds a port nobody holds and names it in its log, so no other
        // process can take a port probed free between the probe and the bind.
        let name = self.next("proxy-http");
        let stderr = self.dir.join(format!("{name}.stderr"));
        let mut cmd = tokio::process::Command::new(&self.proxy);
        cmd.arg("--config")
            .arg(&config)
            .arg("--http")
            .arg("127.0.0.1:0")
            // The proxy's default log filter (its own crates at info, which names the
            // bound port): an operator's. `info` for every crate would time rmcp's line
            // per message too.
            .env_remove("PGIDEM_MCP_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, &name)?)
            .kill_on_drop(true);
        self.children.push(cmd.spawn()?);
        let port = bound_port(&stderr).await?;
        let client = http_client(&format!("http://127.0.0.1:{port}/mcp")).await?;
        Ok(Endpoint { client, log })
    }
}

/// What one side calls: new arguments every time, or the answered ones again in turn;
/// and whether the answer should be marked a replay (`None`: not marked, a direct call).
#[derive(Clone)]
struct Calls {
    again: Option<(String, usize)>,
    replayed: Option<bool>,
}

const DIRECT: Calls = Calls {
    again: None,
    replayed: None,
};
const NEW: Calls = Calls {
    again: None,
    replayed: Some(false),
};

pub(crate) fn arguments(subject: &str) -> Value {
    json!({
        "to": "ada@example.com",
        "subject": subject,
        "body": "Your invoice INV-2024-0042 is attached. Reply to this email if anything looks wrong.",
    })
}

pub(crate) fn replayed(r: &CallToolResult) -> Option<bool> {
    r.meta
        .as_ref()?
        .0
        .get("pg-idempotency/call")?
        .get("replayed")?
        .as_bool()
}

/// One call, timed; checks the answer is the one expected (an error or a replay where a
/// new call was meant, measured as a call, would be a lie).
async fn call_once(e: &Endpoint, calls: &Calls, n: u64) -> BenchResult<Duration> {
    let subject = match &calls.again {
        None => fresh_key("bench"),
        Some((prefix, keys)) => format!("{prefix}-{}", n % *keys as u64),
    };
    let mut params = CallToolRequestParams::new("send_email".to_string());
    params.arguments = arguments(&subject).as_object().cloned();
    // The counting server counts its log's lines on each effect: empty it first.
    std::fs::File::create(&e.log)?;
    let start = Instant::now();
    let result = e.client.call_tool(params).await?;
    let took = start.elapsed();
    if result.is_error == Some(true) {
        return Err(format!("send_email answered an error: {result:?}").into());
    }
    let expected = calls.replayed;
    if replayed(&result) != expected {
        return Err(format!(
            "send_email: replayed {:?}, expected {expected:?}: {result:?}",
            replayed(&result)
        )
        .into());
    }
    Ok(took)
}

async fn calls(
    e: &Endpoint,
    c: &Calls,
    count: usize,
    n: &mut u64,
    into: &mut Vec<Duration>,
) -> BenchResult<()> {
    for _ in 0..count {
        into.push(call_once(e, c, *n).await?);
        *n += 1;
    }
    Ok(())
}

/// Ours beside the baseline: warm-up, then `rounds` alternating rounds. The seconds are
/// the sum of the calls' times (the log emptying between calls left out).
async fn compare(
    plan: McpPlan,
    ours: (&Endpoint, &Calls),
    baseline: (&Endpoint, &Calls),
) -> BenchResult<(Stats, Stats)> {
    let (mut no, mut nb) = (0, 0);
    let mut discard = Vec::new();
    calls(baseline.0, baseline.1, plan.warmup, &mut nb, &mut discard).await?;
    calls(ours.0, ours.1, plan.warmup, &mut no, &mut discard).await?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let rounds = plan.rounds.max(1);
    for r in 0..rounds {
        let count = plan.calls / rounds + usize::from(r < plan.calls % rounds);
        calls(baseline.0, baseline.1, count, &mut nb, &mut b).await?;
        calls(ours.0, ours.1, count, &mut no, &mut a).await?;
    }
    let seconds = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).sum::<f64>();
    let (sa, sb) = (seconds(&a), seconds(&b));
    Ok((stats(a, sa), stats(b, sb)))
}

/// `dsns`: each database the proxy rows run against, with its name in the report.
pub async fn run(dsns: &[(&str, &str)], plan: McpPlan) -> BenchResult<Outcome> {
    let (python, parts_dir) = match parts() {
        Ok(p) => p,
        Err(reason) => return Ok(Outcome::Skipped(reason)),
    };
    let version = std::process::Command::new(&python)
        .args([
            "-c",
            "import sys, importlib.metadata as m; print(sys.version.split()[0], m.version('mcp'))",
        ])
        .output()?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let mut version = version.split(' ');
    let python_note = format!(
        "Python {}, `mcp` {}",
        version.next().unwrap_or("?"),
        version.next().unwrap_or("?")
    );
    let dir = std::env::temp_dir().join(format!("pgidem-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut run = Run {
        dir: dir.clone(),
        script: parts_dir.join("counting_server.py"),
        python,
        proxy: proxy_bin()?,
        children: Vec::new(),
        n: 0,
    };
    let result = measure(&mut run, dsns, plan).await;
    drop(run); // kills the HTTP servers and proxies
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("mcp: the processes' stderr is kept in {}", dir.display());
        print_logs(&dir);
    }
    Ok(Outcome::Measured {
        python: python_note,
        rows: result?,
    })
}

async fn measure(run: &mut Run, dsns: &[(&str, &str)], plan: McpPlan) -> BenchResult<Vec<McpRow>> {
    let mut rows = Vec::new();
    for transport in ["stdio", "Streamable HTTP"] {
        let http = transport != "stdio";
        // Over HTTP, the proxies reach the very server the direct calls do; over stdio each
        // client starts its own (the proxy starts one of its own).
        let (direct, port) = if http {
            let (e, port) = run.direct_http().await?;
            (e, Some(port))
        } else {
            (run.direct_stdio().await?, None)
        };
        let mut proxies = Vec::new();
        for (backend, dsn) in dsns {
            let p = if let Some(port) = port {
                run.proxy_http(dsn, &direct, port).await?
            } else {
                run.proxy_stdio(dsn).await?
            };
            proxies.push((*backend, p));
        }
        for (backend, proxy) in &proxies {
            // The calls the replay row repeats, each answered once now.
            let prefix = fresh_key("bench-replay");
            let again = Some((prefix, plan.replay_keys));
            let first = Calls {
                again: again.clone(),
                replayed: Some(false),
            };
            let (mut n, mut discard) = (0, Vec::new());
            calls(proxy, &first, plan.replay_keys, &mut n, &mut discard).await?;
            let replays = Calls {
                again,
                replayed: Some(true),
            };
            for (name, side) in [
                (format!("through the proxy ({backend}), a new call"), NEW),
                (format!("through the proxy ({backend}), a replay"), replays),
            ] {
                let (ours, baseline) = compare(plan, (proxy, &side), (&direct, &DIRECT)).await?;
                rows.push(McpRow {
                    transport,
                    ours_name: name,
                    ours,
                    baseline,
                });
            }
        }
        for (_, p) in proxies {
            let _ = p.client.cancel().await;
        }
        let _ = direct.client.cancel().await;
    }
    Ok(rows)
}
