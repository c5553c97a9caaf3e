//! Correctness under a stampede: 64 sessions begin one new key at the same moment, round
//! after round. Exactly one may claim; the others see the claim in progress.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

use crate::harness::{connect, fresh_key, percentile, BenchError, BenchResult};

pub struct HotKeyReport {
    pub sessions: usize,
    pub rounds: usize,
    /// Rounds in which exactly one session claimed.
    pub one_claim: usize,
    pub claims: usize,
    pub in_progress: usize,
    pub p50: Duration,
    pub p99: Duration,
}

pub async fn run(dsn: &str, sessions: usize, rounds: usize) -> BenchResult<HotKeyReport> {
    let mut clients = Vec::new();
    for _ in 0..sessions {
        clients.push(connect(dsn).await?);
    }
    let mut report = HotKeyReport {
        sessions,
        rounds,
        one_claim: 0,
        claims: 0,
        in_progress: 0,
        p50: Duration::ZERO,
        p99: Duration::ZERO,
    };
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let key = Arc::new(fresh_key("hot"));
        let barrier = Arc::new(Barrier::new(sessions));
        let mut tasks = Vec::new();
        for c in &clients {
            let (c, key, barrier) = (c.clone(), key.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let statement = c
                    .prepare("SELECT outcome FROM idem_begin('hot', $1)")
                    .await?;
                barrier.wait().await;
                let start = Instant::now();
                let outcome: String = c.query_one(&statement, &[&*key]).await?.get(0);
                Ok::<_, BenchError>((outcome, start.elapsed()))
            }));
        }
        let mut claims = 0;
        for t in tasks {
            let (outcome, took) = t.await.expect("hot key task panicked")?;
            latencies.push(took);
            match outcome.as_str() {
                "claimed" => claims += 1,
                "in_progress" => report.in_progress += 1,
                _ => {}
            }
        }
        report.claims += claims;
        if claims == 1 {
            report.one_claim += 1;
        }
    }
    latencies.sort_unstable();
    report.p50 = percentile(&latencies, 0.5);
    report.p99 = percentile(&latencies, 0.99);
    Ok(report)
}
