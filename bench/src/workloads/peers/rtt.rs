//! What a delay setting actually adds: the median of a one-round-trip request through the
//! forwarder minus the same request sent to the server directly, alternating, so that the
//! report states the measured RTT beside its target (the forwarder's own hop included).

use std::time::{Duration, Instant};

use crate::harness::{connect, percentile, BenchResult};

const PROBES: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    percentile(&v, 0.5)
}

fn added(through: Vec<Duration>, direct: Vec<Duration>) -> Duration {
    median(through).saturating_sub(median(direct))
}

/// `SELECT 1` through the forwarder (`via`) and directly (`direct`), PostgreSQL conninfo.
pub async fn postgres(via: &str, direct: &str) -> BenchResult<Duration> {
    let (a, b) = (connect(via).await?, connect(direct).await?);
    let (sa, sb) = (a.prepare("SELECT 1").await?, b.prepare("SELECT 1").await?);
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..PROBES {
        let t = Instant::now();
        a.query_one(&sa, &[]).await?;
        ta.push(t.elapsed());
        let t = Instant::now();
        b.query_one(&sb, &[]).await?;
        tb.push(t.elapsed());
    }
    Ok(added(ta, tb))
}

/// `PING` through the forwarder and directly, Redis ports on 127.0.0.1.
pub async fn redis(via: u16, direct: u16) -> BenchResult<Duration> {
    let open = |port: u16| redis::Client::open(format!("redis://127.0.0.1:{port}/"));
    let mut a = open(via)?.get_multiplexed_async_connection().await?;
    let mut b = open(direct)?.get_multiplexed_async_connection().await?;
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..PROBES {
        let t = Instant::now();
        redis::cmd("PING").query_async::<String>(&mut a).await?;
        ta.push(t.elapsed());
        let t = Instant::now();
        redis::cmd("PING").query_async::<String>(&mut b).await?;
        tb.push(t.elapsed());
    }
    Ok(added(ta, tb))
}
