//! Runs one operation from N concurrent connections for a fixed time after a warm-up, and
//! reports throughput and latency percentiles. Ours and its baseline run alternately in
//! the same process against the same server, so a ratio compares like with like.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls, Statement};

/// How long and how wide to measure.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub clients: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Ours and the baseline alternate this many times; the figures add up all rounds.
    pub rounds: usize,
}

/// One side's figures.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub ops: u64,
    pub seconds: f64,
    pub p50: Duration,
    pub p95: Duration,
    pub p99: Duration,
}

impl Stats {
    pub fn ops_per_sec(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ops as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Any failure of a benchmark: the database's or the client crate's.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub type BenchResult<T> = std::result::Result<T, BenchError>;

pub type Op = Arc<
    dyn Fn(Arc<Client>, u64) -> Pin<Box<dyn Future<Output = BenchResult<()>> + Send>> + Send + Sync,
>;

pub async fn connect(dsn: &str) -> Result<Arc<Client>, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    let client = Arc::new(client);
    // A new connection may reuse a dropped one's address: forget that one's statements.
    let id = Arc::as_ptr(&client) as usize;
    if let Ok(mut m) = STATEMENTS.lock() {
        m.retain(|(c, _), _| *c != id);
    }
    Ok(client)
}

/// Runs `op` on every client until `until`; returns each call's latency. The second
/// argument of `op` numbers the calls of one client, so a workload can vary its input.
async fn drive(clients: &[Arc<Client>], op: &Op, run_for: Duration) -> BenchResult<Vec<Duration>> {
    let until = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let (client, op) = (client.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = (i as u64) << 40;
            while Instant::now() < until {
                let start = Instant::now();
                op(client.clone(), n).await?;
                latencies.push(start.elapsed());
                n += 1;
            }
            Ok::<_, BenchError>(latencies)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("benchmark task panicked")?);
    }
    Ok(all)
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Measures ours and the baseline alternately, on the same database.
pub async fn compare(dsn: &str, plan: Plan, ours: Op, baseline: Op) -> BenchResult<(Stats, Stats)> {
    compare_across(dsn, dsn, plan, ours, baseline).await
}

/// Measures ours (connected to `ours_dsn`) and the baseline (to `baseline_dsn`)
/// alternately: two databases of one server, such as the portable variant's and the
/// extension's.
pub async fn compare_across(
    ours_dsn: &str,
    baseline_dsn: &str,
    plan: Plan,
    ours: Op,
    baseline: Op,
) -> BenchResult<(Stats, Stats)> {
    let (mut ours_clients, mut baseline_clients) = (Vec::new(), Vec::new());
    for _ in 0..plan.clients {
        ours_clients.push(connect(ours_dsn).await?);
        baseline_clients.push(connect(baseline_dsn).await?);
    }
    drive(&baseline_clients, &baseline, plan.warmup).await?;
    drive(&ours_clients, &ours, plan.warmup).await?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut sa, mut sb) = (0.0, 0.0);
    for _ in 0..plan.rounds {
        let t = Instant::now();
        b.extend(drive(&baseline_clients, &baseline, plan.duration).await?);
        sb += t.elapsed().as_secs_f64();
        let t = Instant::now();
        a.extend(drive(&ours_clients, &ours, plan.duration).await?);
        sa += t.elapsed().as_secs_f64();
    }
    Ok((stats(a, sa), stats(b, sb)))
}

/// Measures one operation alone (no baseline beside it).
pub async fn measure(dsn: &str, plan: Plan, op: Op) -> BenchResult<Stats> {
    let mut clients = Vec::new();
    for _ in 0..plan.clients {
        clients.push(connect(dsn).await?);
    }
    drive(&clients, &op, plan.warmup).await?;
    let t = Instant::now();
    let mut all = Vec::new();
    for _ in 0..plan.rounds {
        all.extend(drive(&clients, &op, plan.duration).await?);
    }
    Ok(stats(all, t.elapsed().as_secs_f64()))
}

/// Keys never used before in this process: every call of a new-key workload claims.
pub fn fresh_key(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let started = *START;
    format!(
        "{prefix}-{pid}-{started}-{}",
        N.fetch_add(1, Ordering::Relaxed)
    )
}

static START: std::sync::LazyLock<u128> = std::sync::LazyLock::new(|| {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
});

pub fn stats(mut latencies: Vec<Duration>, seconds: f64) -> Stats {
    latencies.sort_unstable();
    Stats {
        ops: latencies.len() as u64,
        seconds,
        p50: percentile(&latencies, 0.5),
        p95: percentile(&latencies, 0.95),
        p99: percentile(&latencies, 0.99),
    }
}

type StatementCache = std::sync::Mutex<std::collections::HashMap<(usize, &'static str), Statement>>;
static STATEMENTS: std::sync::LazyLock<StatementCache> = std::sync::LazyLock::new(Default::default);

/// `sql` prepared once per connection, as an application with a statement cache would run
/// it: both sides of a comparison pay one round trip per statement, no parsing.
pub async fn prepared(
    client: &Arc<Client>,
    sql: &'static str,
) -> Result<Statement, tokio_postgres::Error> {
    let id = (Arc::as_ptr(client) as usize, sql);
    if let Some(s) = STATEMENTS.lock().ok().and_then(|m| m.get(&id).cloned()) {
        return Ok(s);
    }
    let s = client.prepare(sql).await?;
    if let Ok(mut m) = STATEMENTS.lock() {
        m.insert(id, s.clone());
    }
    Ok(s)
}
