//! Calls through the Rust client's tool dispatcher and web executor, for the trials that
//! check what the client does when its store fails around a tool's run (F11) and when a
//! takeover finds an earlier attempt's outcome unknown (F12):
//!
//! - [`Counting`]: a store in front of any other that counts the operations made through it,
//!   the ones whose outcome was unknown, and the completions that failed, and lets a test
//!   wait for a count (a failed completion is how a test knows the holder met the fault);
//! - [`EffectTool`]: a tool whose effect is an effect in the ledger under the claim's fence
//!   and upstream key, that counts its runs and can be held at a [`Gate`] before or after
//!   its effect;
//! - [`Provider`]: an HTTP provider on a local socket that counts the requests it executes,
//!   one per `Idempotency-Key` at most when asked to deduplicate, and can hold its answer at
//!   a gate after executing;
//! - [`Verdict`]: the trial's findings as violations of I1 (one effect per key) and I2 (the
//!   result is recorded and replayed identically), for the tally.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use pg_idempotency_client::{
    Begin, BeginOptions, CallContext, Completed, IdempotencyStore, Reconcile, Reconciled, Record,
    ScopeMetrics, Tool, ToolError,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::check::{Invariant, Violation};
use crate::ledger;
use pg_idempotency_tests as suite;

/// How long a trial waits for something it is sure will happen before calling it a
/// failure (generous: the machine may be loaded).
pub const BOUND: Duration = Duration::from_secs(60);

/// What went through a [`Counting`] store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub operations: usize,
    /// Operations that failed without a SQLSTATE of the API (the connection broke, the
    /// server was down, a timeout): their outcome is unknown to the caller.
    pub unknown: usize,
    pub completions: usize,
    pub failed_completions: usize,
}

/// A store in front of `inner` that counts what goes through it.
pub struct Counting {
    inner: Arc<dyn IdempotencyStore>,
    counts: watch::Sender<Counts>,
}

impl Counting {
    pub fn new(inner: Arc<dyn IdempotencyStore>) -> Arc<Counting> {
        Arc::new(Counting {
            inner,
            counts: watch::channel(Counts::default()).0,
        })
    }

    pub fn counts(&self) -> Counts {
        *self.counts.borrow()
    }

    /// Waits until the counts satisfy `what` (at most [`BOUND`]).
    pub async fn until(&self, why: &str, what: impl Fn(&Counts) -> bool) {
        let held =
            suite::eventually_async(BOUND, || std::future::ready(what(&self.counts()))).await;
        assert!(
            held,
            "{why}: not within {BOUND:?}; counts {:?}",
            self.counts()
        );
    }

    fn count<T>(&self, r: &pg_idempotency_client::Result<T>, completion: bool) {
        self.counts.send_modify(|c| {
            c.operations += 1;
            if completion {
                c.completions += 1;
            }
            if let Err(e) = r {
                if e.kind.sqlstate().is_none() {
                    c.unknown += 1;
                }
                if completion {
                    c.failed_completions += 1;
                }
            }
        });
    }
}

#[async_trait]
impl IdempotencyStore for Counting {
    // Defaults kept: begin_batch and complete_batch go item by item through the counted begin
    // and complete; the trials use no joined waits' cap nor a caller's transaction:
    // begin_batch, complete_batch, joins_live_holders, admit_joined_wait, api_schema,
    // statement_mode.
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        options: &BeginOptions,
    ) -> pg_idempotency_client::Result<Begin> {
        let r = self.inner.begin(scope, key, options).await;
        self.count(&r, false);
        r
    }

    async fn complete(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        response: Option<&Value>,
        succeeded: bool,
        cache_failure: Option<bool>,
    ) -> pg_idempotency_client::Result<Completed> {
        let r = self
            .inner
            .complete(scope, key, fence, response, succeeded, cache_failure)
            .await;
        self.count(&r, true);
        r
    }

    async fn release(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
    ) -> pg_idempotency_client::Result<()> {
        let r = self.inner.release(scope, key, fence).await;
        self.count(&r, false);
        r
    }

    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> pg_idempotency_client::Result<SystemTime> {
        let r = self.inner.extend(scope, key, fence, lease).await;
        self.count(&r, false);
        r
    }

    async fn lookup(
        &self,
        scope: &str,
        key: &str,
    ) -> pg_idempotency_client::Result<Option<Record>> {
        self.inner.lookup(scope, key).await
    }

    async fn purge(&self) -> pg_idempotency_client::Result<u64> {
        self.inner.purge().await
    }

    async fn forget(&self, scope: &str, key: &str) -> pg_idempotency_client::Result<bool> {
        self.inner.forget(scope, key).await
    }

    async fn metrics(&self) -> pg_idempotency_client::Result<Vec<ScopeMetrics>> {
        self.inner.metrics().await
    }

    fn durable(&self) -> bool {
        self.inner.durable()
    }

    /// The inner store's: a count in front of it reaches the same records.
    fn identity(&self) -> Option<String> {
        self.inner.identity()
    }
}

/// Where a [`Gate`] holds a tool (or a provider's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    BeforeEffect,
    AfterEffect,
}

/// Holds the next run that reaches its point until the test opens it; the test sees the
/// run arrive (`reached`). One hold at a time.
#[derive(Default)]
pub struct Gate {
    armed: Mutex<Option<Point>>,
    /// The arrival the last `arm` waits for.
    target: Mutex<u32>,
    arrived: watch::Sender<u32>,
    open: watch::Sender<bool>,
}

impl Gate {
    /// The next run that reaches `point` waits there.
    pub fn arm(&self, point: Point) {
        self.open.send_replace(false);
        *self.target.lock().unwrap() = *self.arrived.borrow() + 1;
        *self.armed.lock().unwrap() = Some(point);
    }

    /// Lets the held run go on.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Waits until the run the last `arm` holds has arrived.
    pub async fn reached(&self) {
        let n = *self.target.lock().unwrap();
        let mut rx = self.arrived.subscribe();
        tokio::time::timeout(BOUND, rx.wait_for(|a| *a >= n))
            .await
            .unwrap_or_else(|_| panic!("no run reached the gate within {BOUND:?}"))
            .expect("the sender lives in self");
    }

    /// Called by the run at `point`: waits there if the gate is armed for it.
    pub async fn pass(&self, point: Point) {
        let hold = {
            let mut armed = self.armed.lock().unwrap();
            if *armed == Some(point) {
                *armed = None;
                true
            } else {
                false
            }
        };
        if hold {
            let mut open = self.open.subscribe();
            self.arrived.send_modify(|a| *a += 1);
            let _ = open.wait_for(|o| *o).await;
        }
    }
}

/// The result an [`EffectTool`] returns for an effect: what a reconcile read rebuilds from
/// the ledger, so that a found effect is recorded as the result its run returned.
pub fn receipt(key: &str, upstream_key: uuid::Uuid, fence: i64) -> Value {
    json!({"key": key, "effect": upstream_key.to_string(), "fence": fence})
}

/// A tool whose effect goes to the ledger (under the claim's fence and upstream key, the
/// call's key as the ledger's key), counting its runs, with a gate around the effect.
pub struct EffectTool {
    pub ledger_dsn: String,
    pub runs: AtomicU32,
    pub gate: Gate,
    /// The contexts of its runs (fence, attempt, recovered), in order.
    pub contexts: Mutex<Vec<(i64, i32, bool, uuid::Uuid)>>,
}

impl EffectTool {
    pub fn new(ledger_dsn: &str) -> Arc<EffectTool> {
        Arc::new(EffectTool {
            ledger_dsn: ledger_dsn.to_string(),
            runs: AtomicU32::new(0),
            gate: Gate::default(),
            contexts: Mutex::default(),
        })
    }

    pub fn runs(&self) -> u32 {
        self.runs.load(Ordering::SeqCst)
    }

    /// A reconcile read over the ledger: the effect made under the call's upstream key, as
    /// the receipt its run returned; NotFound when there is none; Unknown when the ledger
    /// cannot be read.
    pub async fn look_up(ledger_dsn: String, call: Reconcile) -> Result<Reconciled, ToolError> {
        let Ok(c) = ledger::connect(&ledger_dsn).await else {
            return Ok(Reconciled::Unknown);
        };
        let row = c
            .query_opt(
                "SELECT fence FROM effects WHERE key = $1 AND upstream_key = $2",
                &[&call.key, &call.upstream_key],
            )
            .await;
        Ok(match row {
            Ok(Some(r)) => Reconciled::Found(receipt(&call.key, call.upstream_key, r.get(0))),
            Ok(None) => Reconciled::NotFound,
            Err(_) => Reconciled::Unknown,
        })
    }
}

#[async_trait]
impl Tool for EffectTool {
    async fn call(&self, _input: Value) -> Result<Value, ToolError> {
        Err(ToolError::new("an effect needs its claim: call_with"))
    }

    async fn call_with(&self, _input: Value, ctx: CallContext) -> Result<Value, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let (Some(key), Some(fence), Some(upstream_key)) =
            (ctx.key.clone(), ctx.fence, ctx.upstream_key)
        else {
            return Err(ToolError::new(
                "a deduplicated call has a key, a fence and an upstream key",
            ));
        };
        self.contexts
            .lock()
            .unwrap()
            .push((fence, ctx.attempt, ctx.recovered, upstream_key));
        self.gate.pass(Point::BeforeEffect).await;
        let c = ledger::connect(&self.ledger_dsn)
            .await
            .map_err(|e| ToolError::new(format!("ledger: {e}")))?;
        match ledger::apply(&c, &key, fence, upstream_key).await {
            crate::history::Outcome::Done => {}
            other => return Err(ToolError::new(format!("ledger: {other:?}"))),
        }
        self.gate.pass(Point::AfterEffect).await;
        Ok(receipt(&key, upstream_key, fence))
    }
}

/// The ledger's effects of `key`: (upstream key, fence), in the order accepted.
pub async fn effects_of(ledger_dsn: &str, key: &str) -> Vec<(uuid::Uuid, i64)> {
    let c = ledger::connect(ledger_dsn).await.expect("the ledger is up");
    c.query(
        "SELECT upstream_key, fence FROM effects WHERE key = $1 ORDER BY at",
        &[&key],
    )
    .await
    .expect("the ledger's effects")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// One request as the provider saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub key: Option<String>,
    pub body: String,
}

/// An HTTP provider on a local socket: every POST is executed (counted) unless
/// `dedup_by_key` and a request with the same `Idempotency-Key` was executed before, in
/// which case its first answer is sent again. Its answer is `{"n": <execution number>,
/// "key": <Idempotency-Key>}`; it can hold an answer at its gate ([`Point::AfterEffect`]:
/// after executing, before answering).
pub struct Provider {
    pub base: String,
    pub gate: Arc<Gate>,
    seen: Arc<Mutex<Vec<Request>>>,
    executed: Arc<Mutex<Vec<Request>>>,
}

impl Provider {
    pub async fn start(dedup_by_key: bool) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let gate = Arc::new(Gate::default());
        let seen: Arc<Mutex<Vec<Request>>> = Arc::default();
        let executed: Arc<Mutex<Vec<Request>>> = Arc::default();
        let answers: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let (g, s, x) = (gate.clone(), seen.clone(), executed.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let (gate, seen, executed, answers) =
                    (g.clone(), s.clone(), x.clone(), answers.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut sock).await else {
                        return;
                    };
                    seen.lock().unwrap().push(request.clone());
                    let earlier = request
                        .key
                        .as_ref()
                        .filter(|_| dedup_by_key)
                        .and_then(|k| answers.lock().unwrap().get(k).cloned());
                    let body = match earlier {
                        Some(answer) => answer,
                        None => {
                            let answer = {
                                let mut executed = executed.lock().unwrap();
                                executed.push(request.clone());
                                json!({"n": executed.len(), "key": request.key})
                            };
                            if let Some(k) = &request.key {
                                answers.lock().unwrap().insert(k.clone(), answer.clone());
                            }
                            gate.pass(Point::AfterEffect).await;
                            answer
                        }
                    };
                    let text = body.to_string();
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        Provider {
            base,
            gate,
            seen,
            executed,
        }
    }

    /// Requests executed (each one effect).
    pub fn executed(&self) -> Vec<Request> {
        self.executed.lock().unwrap().clone()
    }

    /// Requests received, executed or answered from an earlier one.
    pub fn seen(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }
}

/// One request off the socket: its `Idempotency-Key` and body.
async fn read_request(sock: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(Request {
        key: header("idempotency-key"),
        body: String::from_utf8_lossy(&buf[head_end..]).to_string(),
    })
}

/// A trial's findings, as violations the tally counts.
#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
}

impl Verdict {
    /// Records a violation of `invariant` on `key` unless `holds`.
    pub fn expect(
        &mut self,
        invariant: Invariant,
        key: &str,
        holds: bool,
        explanation: impl Into<String>,
    ) {
        if !holds {
            self.violations.push(Violation {
                invariant,
                key: key.to_string(),
                explanation: explanation.into(),
            });
        }
    }

    /// I2 for a call that ended with `result`: the record is succeeded with that result.
    pub async fn recorded(
        &mut self,
        store: &dyn IdempotencyStore,
        scope: &str,
        key: &str,
        result: &Value,
    ) {
        match store.lookup(scope, key).await {
            Ok(Some(r)) => self.expect(
                Invariant::I2,
                key,
                r.state == pg_idempotency_client::State::Succeeded
                    && r.response.as_ref() == Some(result),
                format!(
                    "the record holds {:?} {:?}, not succeeded with {result}",
                    r.state, r.response
                ),
            ),
            other => self.expect(
                Invariant::I2,
                key,
                false,
                format!("no record of the call whose result was {result}: {other:?}"),
            ),
        }
    }

    /// Panics with every violation, if any.
    pub fn assert_clean(&self, what: &str) {
        assert!(
            self.violations.is_empty(),
            "{what}:\n{}",
            self.violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A private redis-server on a port of its own, keeping an append-only file synced at every
/// write (a restart reloads what was acknowledged), in a folder of its own.
pub struct PrivateRedis {
    pub port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    /// None (and the test recorded as skipped) when redis-server is not installed.
    pub fn start(name: &str) -> Option<PrivateRedis> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            suite::skip(
                suite::Skip::Missing,
                "redis-server is not installed (scripts/setup.sh installs it as root)",
            );
            return None;
        }
        let dir = suite::root()
            .join("target")
            .join("faults")
            .join(format!("redis-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = PrivateRedis {
            port: free_port(),
            dir,
            child: None,
        };
        redis.launch();
        Some(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// What the report names it by: `Redis <version>`.
    pub fn version(&self) -> String {
        let out = Command::new("redis-server").arg("--version").output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        let v = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or("?");
        format!("Redis {v}")
    }

    /// Starts the server (again, after `kill`) and waits until it answers.
    pub fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--dir",
                self.dir.to_str().unwrap(),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--logfile",
                "redis.log",
            ])
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let until = Instant::now() + BOUND;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < until, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Listening comes before the append-only file is loaded: ask until it answers.
        let client = redis::Client::open(self.url()).unwrap();
        while client
            .get_connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_err()
        {
            assert!(Instant::now() < until, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL: nothing more is written) and starts it again on the same
    /// port and files.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    pub fn signal(&self, name: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{name} {pid}");
    }

    /// Kills the server (continued first if stopped).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
