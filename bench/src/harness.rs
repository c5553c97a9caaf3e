//! Runs one operation from N concurrent connections for a fixed time after a warm-up, and
//! reports throughput and latency percentiles. Ours and its baseline run alternately in
//! the same process against the same server, so a ratio compares like with like.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

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

pub type Op = Arc<
    dyn Fn(
            Arc<Client>,
            u64,
        ) -> Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>
        + Send
        + Sync,
>;

pub async fn connect(dsn: &str) -> Result<Arc<Client>, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    Ok(Arc::new(client))
}

/// Runs `op` on every client until `until`; returns each call's latency. The second
/// argument of `op` numbers the calls of one client, so a workload can vary its input.
async fn drive(
    clients: &[Arc<Client>],
    op: &Op,
    run_for: Duration,
) -> Result<Vec<Duration>, tokio_postgres::Error> {
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
            Ok::<_, tokio_postgres::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("benchmark task panicked")?);
    }
    Ok(all)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Measures ours and the baseline alternately.
pub async fn compare(
    dsn: &str,
    plan: Plan,
    ours: Op,
    baseline: Op,
) -> Result<(Stats, Stats), tokio_postgres::Error> {
    let mut clients = Vec::new();
    for _ in 0..plan.clients {
        clients.push(connect(dsn).await?);
    }
    drive(&clients, &baseline, plan.warmup).await?;
    drive(&clients, &ours, plan.warmup).await?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut sa, mut sb) = (0.0, 0.0);
    for _ in 0..plan.rounds {
        let t = Instant::now();
        b.extend(drive(&clients, &baseline, plan.duration).await?);
        sb += t.elapsed().as_secs_f64();
        let t = Instant::now();
        a.extend(drive(&clients, &ours, plan.duration).await?);
        sa += t.elapsed().as_secs_f64();
    }
    Ok((stats(a, sa), stats(b, sb)))
}

fn stats(mut latencies: Vec<Duration>, seconds: f64) -> Stats {
    latencies.sort_unstable();
    Stats {
        ops: latencies.len() as u64,
        seconds,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
    }
}
