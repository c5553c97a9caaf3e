//! The proxy's limits under a flood (`--only mcp_flood`): one principal's `tools/call`
//! latency through `pg-idempotency-mcp` over Streamable HTTP, with and without a flood of
//! waiting duplicates from another principal, alternately in one run.
//!
//! One proxy (the real binary, two bearer tokens, a pool of `pool_size` connections, the
//! `[limits]` defaults) in front of one counting server over HTTP. Principal B calls
//! `send_email` with new arguments each time, one call after another, timed. In a flooded
//! round, principal A first starts a call the counting server holds (its hold folder), then
//! `crowd` duplicates of it over four sessions, each sent again once it is answered: after
//! the answer's `retryAfterMs` (at most 2 s: clients that do as they are told), or after
//! 20 ms whatever the answer says (a hostile crowd; the pause keeps it from being a loop
//! that only spins the cores). B's calls are timed once the crowd has been answered
//! `in_progress` (the gate at work), and the held call is let go after them. Quiet and the
//! two flooded rounds alternate. Every duplicate must be answered `in_progress` or with the
//! held call's replay: a duplicate that ran, or any other answer, ends the run with an
//! error.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ErrorCode};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use super::mcp::{
    arguments, bound_port, free_port, log_file, parts, print_logs, proxy_bin, replayed, toml_str,
    wait_listening,
};
use crate::harness::{fresh_key, stats, BenchResult, Stats};

/// The proxy's `in_progress` code (mcp/src/answer.rs).
const IN_PROGRESS: i32 = -32071;

#[derive(Debug, Clone, Copy)]
pub struct FloodPlan {
    /// B's calls before the measurement.
    pub warmup: usize,
    /// B's measured calls on each side, in `rounds` alternating rounds.
    pub calls: usize,
    pub rounds: usize,
    /// A's duplicates at once.
    pub crowd: usize,
    /// `[database] pool_size`.
    pub pool_size: usize,
}

/// How the crowd sends a duplicate again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// After the answer's `retryAfterMs` (at most 2 s).
    RetryAfter,
    /// 20 ms after any answer.
    Hostile,
}

impl Pace {
    fn pause(self, retry_after_ms: Option<u64>) -> Duration {
        match self {
            Pace::RetryAfter => Duration::from_millis(retry_after_ms.unwrap_or(20).min(2000)),
            Pace::Hostile => Duration::from_millis(20),
        }
    }
}

pub struct Flood {
    pub python: String,
    pub quiet: Stats,
    /// Under a crowd that retries after `retryAfterMs`.
    pub polite: Stats,
    /// Under a crowd that retries every 20 ms.
    pub flooded: Stats,
    /// What the crowd was answered, over every flooded round.
    pub in_progress: u64,
    pub replays: u64,
}

impl Flood {
    /// Flooded / quiet at a percentile: 1 is no slower under the flood.
    pub fn ratio(flooded: Duration, quiet: Duration) -> f64 {
        if quiet.is_zero() {
            0.0
        } else {
            flooded.as_secs_f64() / quiet.as_secs_f64()
        }
    }
}

pub enum Outcome {
    Skipped(String),
    Measured(Box<Flood>),
}

type Client = RunningService<RoleClient, ()>;

/// The two principals' bearer tokens (the front refuses tokens under 16 bytes).
const TOKEN_A: &str = "tenant-a-secret-0123456789";
const TOKEN_B: &str = "tenant-b-secret-0123456789";

async fn client(url: &str, token: &str) -> BenchResult<Client> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(token);
    Ok(
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await?,
    )
}

/// The processes (killed when dropped) and their files.
struct Run {
    dir: PathBuf,
    log: PathBuf,
    hold: PathBuf,
    children: Vec<tokio::process::Child>,
}

impl Run {
    /// The counting server over HTTP, with a hold folder; then the proxy in front of it.
    /// The proxy's URL.
    async fn start(
        &mut self,
        python: &Path,
        script: &Path,
        dsn: &str,
        pool_size: usize,
    ) -> BenchResult<String> {
        let port = free_port()?;
        let mut server = tokio::process::Command::new(python);
        server
            .arg(script)
            .arg("--http")
            .arg(port.to_string())
            .env("COUNTING_LOG", &self.log)
            .env("COUNTING_HOLD_DIR", &self.hold)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, "server")?)
            .kill_on_drop(true);
        self.children.push(server.spawn()?);
        wait_listening("the counting server", port).await?;
        let config = self.dir.join("proxy.toml");
        std::fs::write(
            &config,
            format!(
                "[database]\nurl = {}\npool_size = {pool_size}\n\n[front]\nclients = [{{ token = \"{TOKEN_A}\", principal = \"tenant-a\" }}, {{ token = \"{TOKEN_B}\", principal = \"tenant-b\" }}]\n\n[upstream]\nname = {}\nurl = \"http://127.0.0.1:{port}/mcp\"\n\n[tools.send_email]\nwait = \"30s\"\n",
                toml_str(dsn),
                toml_str(&fresh_key("bench-flood")),
            ),
        )?;
        let mut proxy = tokio::process::Command::new(proxy_bin()?);
        proxy
            .arg("--config")
            .arg(&config)
            .arg("--http")
            .arg("127.0.0.1:0")
            .env("PGIDEM_MCP_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir, "proxy")?)
            .kill_on_drop(true);
        self.children.push(proxy.spawn()?);
        let port = bound_port(&self.dir.join("proxy.stderr")).await?;
        Ok(format!("http://127.0.0.1:{port}/mcp"))
    }
}

/// One of B's calls, timed: a new call, which must run.
async fn timed_call(b: &Client, log: &Path) -> BenchResult<Duration> {
    let mut params = CallToolRequestParams::new("send_email".to_string());
    params.arguments = arguments(&fresh_key("bench-b")).as_object().cloned();
    // The counting server counts its log's lines on each effect: empty it first.
    std::fs::File::create(log)?;
    let start = Instant::now();
    let result = b.call_tool(params).await?;
    let took = start.elapsed();
    if result.is_error == Some(true) || replayed(&result) != Some(false) {
        return Err(format!("B's call did not run as a new call: {result:?}").into());
    }
    Ok(took)
}

async fn timed_calls(
    b: &Client,
    log: &Path,
    n: usize,
    into: &mut Vec<Duration>,
) -> BenchResult<()> {
    for _ in 0..n {
        into.push(timed_call(b, log).await?);
    }
    Ok(())
}

/// The crowd's answers, shared by its tasks.
#[derive(Default)]
struct Tally {
    in_progress: AtomicU64,
    replays: AtomicU64,
}

/// A held call of A and its crowd of duplicates, until `stop`; an error for any answer but
/// in_progress or the replay.
fn crowd(
    sessions: &[Arc<Client>],
    n: usize,
    id: &str,
    pace: Pace,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<BenchResult<()>>> {
    (0..n)
        .map(|i| {
            let client = sessions[i % sessions.len()].clone();
            let (stop, tally, args) = (stop.clone(), tally.clone(), held(id));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let mut params = CallToolRequestParams::new("send_email".to_string());
                    params.arguments = args.as_object().cloned();
                    let retry_after = match client.call_tool(params).await {
                        Ok(r) if replayed(&r) == Some(true) => {
                            tally.replays.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(ServiceError::McpError(e)) if e.code == ErrorCode(IN_PROGRESS) => {
                            tally.in_progress.fetch_add(1, Ordering::Relaxed);
                            e.data.as_ref().and_then(|d| d["retryAfterMs"].as_u64())
                        }
                        other => return Err(format!("a duplicate was answered {other:?}").into()),
                    };
                    tokio::time::sleep(pace.pause(retry_after)).await;
                }
                Ok(())
            })
        })
        .collect()
}

fn held(id: &str) -> serde_json::Value {
    json!({"to": "ada@example.com", "subject": "held", "message_id": id, "hold": true})
}

async fn until(what: &str, mut check: impl FnMut() -> bool) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        if Instant::now() > deadline {
            return Err(format!("waited a minute for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A flooded round: A's held call and its crowd, B's `n` calls timed meanwhile.
#[allow(clippy::too_many_arguments)]
async fn flooded_round(
    run: &Run,
    a: &[Arc<Client>],
    b: &Client,
    plan: FloodPlan,
    n: usize,
    pace: Pace,
    tally: &Arc<Tally>,
    into: &mut Vec<Duration>,
) -> BenchResult<()> {
    let id = fresh_key("held");
    let release = run.hold.join("release");
    let _ = std::fs::remove_file(&release);
    let first = {
        let (a, args) = (a[0].clone(), held(&id));
        tokio::spawn(async move {
            let mut params = CallToolRequestParams::new("send_email".to_string());
            params.arguments = args.as_object().cloned();
            a.call_tool(params).await
        })
    };
    let marker = run.hold.join(format!("held-{id}"));
    until("the held call", || marker.exists()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let before = tally.in_progress.load(Ordering::Relaxed);
    let tasks = crowd(a, plan.crowd, &id, pace, &stop, tally);
    // The flood is on once the gate has answered some of the crowd at once.
    until("the crowd's first in_progress answer", || {
        tally.in_progress.load(Ordering::Relaxed) > before
    })
    .await?;
    let timed = timed_calls(b, &run.log, n, into).await;
    std::fs::write(&release, b"go")?;
    let first = first.await?;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await??;
    }
    timed?;
    if replayed(&first?) != Some(false) {
        return Err("the held call did not run as a new call".into());
    }
    Ok(())
}

pub async fn run(dsn: &str, plan: FloodPlan) -> BenchResult<Outcome> {
    let (python, parts_dir) = match parts() {
        Ok(p) => p,
        Err(reason) => return Ok(Outcome::Skipped(reason)),
    };
    let version = std::process::Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output()?;
    let note = format!("`mcp` {}", String::from_utf8_lossy(&version.stdout).trim());
    let dir = std::env::temp_dir().join(format!("pgidem-bench-flood-{}", std::process::id()));
    let hold = dir.join("hold");
    std::fs::create_dir_all(&hold)?;
    let mut run = Run {
        log: dir.join("effects.jsonl"),
        hold,
        dir: dir.clone(),
        children: Vec::new(),
    };
    let result = measure(
        &mut run,
        &python,
        &parts_dir.join("counting_server.py"),
        dsn,
        plan,
    )
    .await;
    drop(run);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "mcp_flood: the processes' stderr is kept in {}",
            dir.display()
        );
        print_logs(&dir);
    }
    let ([quiet, polite, flooded], tally) = result?;
    Ok(Outcome::Measured(Box::new(Flood {
        python: note,
        quiet,
        polite,
        flooded,
        in_progress: tally.in_progress.load(Ordering::Relaxed),
        replays: tally.replays.load(Ordering::Relaxed),
    })))
}

async fn measure(
    run: &mut Run,
    python: &Path,
    script: &Path,
    dsn: &str,
    plan: FloodPlan,
) -> BenchResult<([Stats; 3], Arc<Tally>)> {
    let url = run.start(python, script, dsn, plan.pool_size).await?;
    let b = client(&url, TOKEN_B).await?;
    let mut a = Vec::new();
    for _ in 0..4 {
        a.push(Arc::new(client(&url, TOKEN_A).await?));
    }
    let mut discard = Vec::new();
    timed_calls(&b, &run.log, plan.warmup, &mut discard).await?;
    let tally = Arc::new(Tally::default());
    let (mut quiet, mut polite, mut flooded) = (Vec::new(), Vec::new(), Vec::new());
    let rounds = plan.rounds.max(1);
    for r in 0..rounds {
        let n = plan.calls / rounds + usize::from(r < plan.calls % rounds);
        timed_calls(&b, &run.log, n, &mut quiet).await?;
        let pace = Pace::RetryAfter;
        flooded_round(run, &a, &b, plan, n, pace, &tally, &mut polite).await?;
        flooded_round(run, &a, &b, plan, n, Pace::Hostile, &tally, &mut flooded).await?;
    }
    let timed = |v: Vec<Duration>| {
        let seconds = v.iter().map(Duration::as_secs_f64).sum::<f64>();
        stats(v, seconds)
    };
    let _ = b.cancel().await;
    for s in a {
        if let Ok(s) = Arc::try_unwrap(s) {
            let _ = s.cancel().await;
        }
    }
    Ok(([timed(quiet), timed(polite), timed(flooded)], tally))
}
