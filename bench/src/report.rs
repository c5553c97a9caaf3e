//! The Markdown report: the machine, the server's settings, and one row per workload.

use std::fmt::Write;
use std::time::Duration;

use crate::harness::{connect, Plan};
use crate::workloads::churn::ChurnReport;
use crate::workloads::Row;

fn cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {model}")
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

pub async fn markdown(
    dsn: &str,
    plan: Plan,
    smoke: bool,
    rows: &[Row],
) -> Result<String, tokio_postgres::Error> {
    let c = connect(dsn).await?;
    let version: String = c.query_one("SELECT version()", &[]).await?.get(0);
    let mut settings = Vec::new();
    for name in [
        "shared_buffers",
        "fsync",
        "synchronous_commit",
        "max_connections",
        "autovacuum_naptime",
    ] {
        let v: String = c.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        settings.push(format!("`{name}` = {v}"));
    }
    let mut s = String::new();
    let _ = writeln!(s, "# Benchmarks\n");
    if smoke {
        let _ = writeln!(s, "**Smoke run: tiny counts, the figures mean nothing.**\n");
    }
    let _ = writeln!(s, "Written by `scripts/bench.sh`. Ours and its baseline run alternately, {} round(s) of {:?} each after a {:?} warm-up, from {} connection(s), against the same server in the same run. The ratio is ours / baseline in operations per second: above 1 is faster than the baseline.\n", plan.rounds, plan.duration, plan.warmup, plan.clients);
    let _ = writeln!(s, "- machine: {}", cpu());
    let _ = writeln!(s, "- server: {version}");
    let _ = writeln!(s, "- settings: {}\n", settings.join(", "));
    let _ = writeln!(s, "| workload | ours | ops/s | p50 ms | p99 ms | baseline | ops/s | p50 ms | p99 ms | ratio | goal |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let goal = match r.goal {
            Some(g) => format!(
                "≥ {g}x {}",
                if r.ratio() >= g { "(met)" } else { "(missed)" }
            ),
            None => "report".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {} | {:.1} | {} | {} | {:.2}x | {} |",
            r.workload,
            r.ours_name,
            r.ours.ops_per_sec(),
            ms(r.ours.p50),
            ms(r.ours.p99),
            r.baseline_name,
            r.baseline.ops_per_sec(),
            ms(r.baseline.p50),
            ms(r.baseline.p99),
            r.ratio(),
            goal
        );
    }
    Ok(s)
}

fn mb(bytes: i64) -> String {
    format!("{:.2} MB", bytes as f64 / 1_048_576.0)
}

/// The storage-under-churn section.
pub fn churn(ttl: Duration, cycles: u32, r: &ChurnReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Storage under churn\n");
    let _ = writeln!(s, "Two sessions claim and complete new keys as fast as they can with a ttl of {ttl:?}, for {cycles} ttl cycles ({:.0} s, {} calls, {:.0} calls/s); `idem_purge_expired()` runs every tenth of the ttl, and autovacuum with the server's settings and the table's own. Size is `pg_total_relation_size` (heap, TOAST and the key index), sampled every 0.5 s; the live set is the live records copied into a fresh table with the same fillfactor.\n", r.seconds, r.calls, r.calls as f64 / r.seconds);
    let _ = writeln!(s, "| live records at the end | live set size | largest size, second half | size at the end | largest / live set | goal | HOT updates |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let hot = if r.updates > 0 {
        100.0 * r.hot_updates as f64 / r.updates as f64
    } else {
        0.0
    };
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {:.2}x | ≤ 2x {} | {:.0}% of {} updates ({} dead tuples at the end) |",
        r.live_rows, mb(r.live_bytes), mb(r.max_bytes), mb(r.end_bytes), r.ratio(),
        if r.ratio() <= 2.0 { "(met)" } else { "(missed)" }, hot, r.updates, r.dead_tuples_end
    );
    s
}
