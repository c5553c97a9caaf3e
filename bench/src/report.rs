//! The Markdown report: the machine, the server's settings, and one row per workload.

use std::fmt::Write;
use std::time::Duration;

pub mod batch;
pub mod mcp_flood;
pub mod peers;

use crate::harness::{connect, Plan};
use crate::workloads::churn::ChurnReport;
use crate::workloads::Row;

/// The report's title alone, for a run whose workloads all have sections of their own.
pub fn title(smoke: bool) -> String {
    let mut s = String::from("# Benchmarks\n\n");
    if smoke {
        s.push_str("**Smoke run: tiny counts, the figures mean nothing.**\n\n");
    }
    s
}

pub(crate) fn cpu() -> String {
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

pub(crate) fn ms(d: Duration) -> String {
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
    let _ = writeln!(s, "Written by `scripts/bench.sh`. Ours and its baseline run alternately, {} round(s) of {:?} each after a {:?} warm-up, from {} connection(s) unless the workload names more, against the same server in the same run. The ratio is ours / baseline in operations per second: above 1 is faster than the baseline.\n", plan.rounds, plan.duration, plan.warmup, plan.clients);
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

/// The hot-key section: a correctness figure, with the latency of the stampede.
pub fn hot_key(r: &crate::workloads::hot_key::HotKeyReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Hot key\n");
    let _ = writeln!(s, "{} sessions call `idem_begin` on one new key at the same moment (a barrier releases them), {} times with a new key each time.\n", r.sessions, r.rounds);
    let _ = writeln!(
        s,
        "| rounds with exactly one claim | claims | in_progress answers | p50 ms | p99 ms | goal |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let _ = writeln!(
        s,
        "| {} of {} | {} | {} | {} | {} | exactly one claim {} |",
        r.one_claim,
        r.rounds,
        r.claims,
        r.in_progress,
        ms(r.p50),
        ms(r.p99),
        if r.one_claim == r.rounds {
            "(met)"
        } else {
            "(missed)"
        }
    );
    s
}

/// The counts section: the scrape beside plain counts, the hot path with counting on
/// beside off.
pub fn counts(r: &crate::workloads::counts::CountsReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Outcome counts\n");
    let _ = writeln!(s, "The scrape, `idem_metrics()` as an admin (every owner's rows), with {} scopes and {} records ({:.0} s to load), one client, beside plain counts of the tables it reads, alternating in the same run. Then `idem_begin` from {} clients in one scope, each call setting `pg_idempotency.count_outcomes` (1: counting on; 0: off; both sides pay the `set_config`), alternating.\n", r.scopes, r.records, r.load_seconds, r.clients);
    let _ = writeln!(
        s,
        "| scrape | ours | p50 ms | baseline | p50 ms | ratio of times |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (what, ours, base, on, bn) in &r.scrape {
        let ratio = ours.p50.as_secs_f64() / base.p50.as_secs_f64().max(1e-9);
        let _ = writeln!(
            s,
            "| {what} | {on} | {} | {bn} | {} | {ratio:.1}x |",
            ms(ours.p50),
            ms(base.p50)
        );
    }
    let _ = writeln!(s, "\n| backend | `idem_begin` | counting on: calls/s | p50 ms | p99 ms | off: calls/s | p50 ms | p99 ms | on / off throughput |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for (backend, call, on, off) in &r.hot {
        let ratio = on.ops_per_sec() / off.ops_per_sec().max(1e-9);
        let _ = writeln!(
            s,
            "| {backend} | {call} | {:.0} | {} | {} | {:.0} | {} | {} | {ratio:.2} |",
            on.ops_per_sec(),
            ms(on.p50),
            ms(on.p99),
            off.ops_per_sec(),
            ms(off.p50),
            ms(off.p99)
        );
    }
    s
}

/// The growth section: latency with a large table over latency with a small one.
pub fn growth(r: &crate::workloads::growth::GrowthReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Growth\n");
    let _ = writeln!(s, "`idem_begin` from one client with {} records in the table, then again after loading it to {} records ({:.0} s to load; {} with its index at the end). New keys and stored keys are hex digests, spread over the whole key index.\n", r.small_rows, r.large_rows, r.load_seconds, mb(r.table_bytes));
    let _ = writeln!(s, "| call | p50 ms, {} rows | p50 ms, {} rows | ratio | goal | p99 ms, small | p99 ms, large |", r.small_rows, r.large_rows);
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    for (name, small, large, goal) in [
        (
            "`idem_begin`, new key (claim)",
            &r.claim_small,
            &r.claim_large,
            Some(1.3),
        ),
        (
            "`idem_begin`, stored key (replay)",
            &r.replay_small,
            &r.replay_large,
            None,
        ),
    ] {
        let ratio = large.p50.as_secs_f64() / small.p50.as_secs_f64().max(1e-9);
        let goal = match goal {
            Some(g) => format!("≤ {g}x {}", if ratio <= g { "(met)" } else { "(missed)" }),
            None => "report".into(),
        };
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {ratio:.2}x | {goal} | {} | {} |",
            ms(small.p50),
            ms(large.p50),
            ms(small.p99),
            ms(large.p99)
        );
    }
    s
}

/// The HTTP layer's section: each request through the layer beside the same handler
/// without it, and the time the layer adds to a request.
pub fn http(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## HTTP layer\n");
    let _ = writeln!(s, "`pg_idempotency_server`'s `IdempotencyLayer` over `PgStore` around an axum handler that only answers `201 {{\"ok\": true}}`, beside the same handler without the layer: one server in the benchmark's process on 127.0.0.1, one keep-alive client, requests one after another, alternating as above. The handler does no work of its own, so the ratio is the layer's whole cost; a handler that writes to the database makes it smaller. Added per request is the difference of the mean times per request (1 / throughput).\n");
    let _ = writeln!(s, "| request | with the layer: req/s | p50 ms | p99 ms | without: req/s | p50 ms | p99 ms | added per request, ms | ratio |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let mean_ms = |ops_per_sec: f64| {
        if ops_per_sec > 0.0 {
            1000.0 / ops_per_sec
        } else {
            0.0
        }
    };
    for r in rows {
        let added = mean_ms(r.ours.ops_per_sec()) - mean_ms(r.baseline.ops_per_sec());
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {:.1} | {} | {} | {:.3} | {:.2}x |",
            r.ours_name,
            r.ours.ops_per_sec(),
            ms(r.ours.p50),
            ms(r.ours.p99),
            r.baseline.ops_per_sec(),
            ms(r.baseline.p50),
            ms(r.baseline.p99),
            added,
            r.ratio()
        );
    }
    s
}

/// The MCP proxy's section: each `tools/call` through the proxy beside the same call made
/// directly to the server, over the same transport, and the time the proxy adds to it.
pub fn mcp(
    outcome: &crate::workloads::mcp::Outcome,
    plan: crate::workloads::mcp::McpPlan,
) -> String {
    use crate::workloads::mcp::Outcome;
    let mut s = String::new();
    let _ = writeln!(s, "\n## MCP proxy\n");
    let (python, rows) = match outcome {
        Outcome::Skipped(reason) => {
            let _ = writeln!(s, "Skipped: {reason}.");
            return s;
        }
        Outcome::Measured { python, rows } => (python, rows),
    };
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let _ = writeln!(s, "`pg-idempotency-mcp` (the {profile} binary) in front of the counting server (tests/mcp-parts/counting_server.py: {python}), beside the same server called directly, over the same transport: an rmcp client calls `send_email`, whose effect is one fsync'd line in a log. Over stdio the client starts the server, or the proxy, which starts the server; over Streamable HTTP the server listens on 127.0.0.1, or the proxy listens there and reaches that same server over HTTP. A new call has other arguments each time (the proxy's key comes from them, its default) and goes on to the server between its claim and its completion; a replay repeats one of {} answered calls and does not reach the server. Each database has a proxy of its own: the extension's, and the portable SQL variant's. One client, one call after another: {} warm-up calls per side, then {} calls per side in {} rounds, direct and proxied alternating; the server's effect log is emptied before each call, outside its timing (the counting server counts the log's lines on every effect). Added is the proxied time minus the direct time at the same percentile; the ratio is direct / proxied in mean time per call (above 1: faster than calling the server directly).\n", plan.replay_keys, plan.warmup, plan.calls, plan.rounds);
    let _ = writeln!(s, "- machine: {}\n", cpu());
    let _ = writeln!(s, "| transport | call | calls/s | p50 ms | p95 ms | direct: calls/s | p50 ms | p95 ms | added p50 ms | added p95 ms | ratio |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    let signed =
        |a: Duration, b: Duration| format!("{:+.3}", (a.as_secs_f64() - b.as_secs_f64()) * 1000.0);
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {} | {} | {:.2}x |",
            r.transport,
            r.ours_name,
            r.ours.ops_per_sec(),
            ms(r.ours.p50),
            ms(r.ours.p95),
            r.baseline.ops_per_sec(),
            ms(r.baseline.p50),
            ms(r.baseline.p95),
            signed(r.ours.p50, r.baseline.p50),
            signed(r.ours.p95, r.baseline.p95),
            r.ratio()
        );
    }
    s
}

/// Mean time per call in microseconds, from throughput and the number of clients (Little's
/// law: each client has one call in flight).
fn mean_us(ops_per_sec: f64, clients: usize) -> f64 {
    if ops_per_sec > 0.0 {
        clients as f64 * 1e6 / ops_per_sec
    } else {
        0.0
    }
}

/// The PL/Proxy section: claim + complete through a proxy beside the same calls on one
/// partition directly, per partition count; the keys' spread; the routing hash's cost.
pub fn sharding(outcome: &crate::workloads::sharding::Outcome, plan: Plan, fsync: bool) -> String {
    use crate::workloads::sharding::Outcome;
    let mut s = String::new();
    let title = if fsync { "" } else { ", `fsync = off`" };
    let _ = writeln!(s, "\n## Through a PL/Proxy proxy{title}\n");
    let r = match outcome {
        Outcome::Skipped(reason) => {
            let _ = writeln!(s, "Skipped: {reason}.");
            return s;
        }
        Outcome::Measured(r) => r,
    };
    if !fsync {
        let _ = writeln!(s, "The same as the section above, with `fsync = off` on the proxy's and partitions' server (a reload): the commit's flush, the largest and most variable part of a call on a small machine's shared disk, then no longer hides the hop, so the time added is the hop's own work and scheduling.\n");
    }
    let _ = writeln!(s, "`idem_begin` + `idem_complete` of a new key through a proxy database (sql/proxy/, made by scripts/sharded.sh) in front of 1, 2 and 4 partition databases, beside the same two calls made directly on partition 0 of that proxy: the proxy's side and the direct side alternate, {} round(s) of {:?} each after a {:?} warm-up, in one run. The ratio is proxy / direct in operations per second (below 1: the hop's cost). Added per call is the difference of the mean times per call (clients / throughput); added p50 the difference of the medians. Every database, the proxy's and the partitions', is on one server, on the benchmark's machine, so the clients, the proxy's backends and the partitions' backends share its cores and its loopback: this measures what the hop costs a call (a second connection, PL/Proxy's call, the routing hash in SQL), not scale-out. More partitions on one server cannot be faster here; on servers of their own they would add capacity, which this machine cannot show.\n", plan.rounds, plan.duration, plan.warmup);
    let _ = writeln!(s, "- machine: {}", cpu());
    let _ = writeln!(
        s,
        "- server: {} (PL/Proxy is packaged for PostgreSQL 15 only here)\n",
        r.server
    );
    let _ = writeln!(s, "| backend | partitions | clients | proxy: ops/s | p50 ms | p99 ms | direct: ops/s | p50 ms | p99 ms | ratio | added per call, µs | added p50, µs |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for m in &r.measured {
        for (clients, row) in &m.rows {
            let added = mean_us(row.ours.ops_per_sec(), *clients)
                - mean_us(row.baseline.ops_per_sec(), *clients);
            let added_p50 = (row.ours.p50.as_secs_f64() - row.baseline.p50.as_secs_f64()) * 1e6;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {} | {} | {:.1} | {} | {} | {:.2}x | {:+.0} | {:+.0} |",
                m.backend,
                m.partitions,
                clients,
                row.ours.ops_per_sec(),
                ms(row.ours.p50),
                ms(row.ours.p99),
                row.baseline.ops_per_sec(),
                ms(row.baseline.p50),
                ms(row.baseline.p99),
                row.ratio(),
                added,
                added_p50
            );
        }
    }
    let _ = writeln!(s, "\nWhere the proxy's keys went: the records of the proxy's scope on each partition after the run (the direct side's keys, in a scope of their own, are not counted). Largest / mean is 1 for an even spread.\n");
    let _ = writeln!(
        s,
        "| backend | partitions | keys | per partition | largest / mean |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for m in &r.measured {
        let total: i64 = m.distribution.iter().sum();
        let largest = m.distribution.iter().copied().max().unwrap_or(0);
        let mean = total as f64 / m.distribution.len().max(1) as f64;
        let shares: Vec<String> = m
            .distribution
            .iter()
            .map(|n| format!("{n} ({:.1}%)", 100.0 * *n as f64 / total.max(1) as f64))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.3} |",
            m.backend,
            m.partitions,
            total,
            shares.join(", "),
            if mean > 0.0 {
                largest as f64 / mean
            } else {
                0.0
            }
        );
    }
    let rt = &r.routing;
    let _ = writeln!(s, "\nThe routing hash alone, on the proxy, 1 client: each claim + complete computes it twice (once per call).\n");
    let _ = writeln!(
        s,
        "| call | ops/s | p50 ms | baseline | ops/s | p50 ms | added per call, µs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let _ = writeln!(
        s,
        "| {} | {:.1} | {} | {} | {:.1} | {} | {:+.0} |",
        rt.ours_name,
        rt.ours.ops_per_sec(),
        ms(rt.ours.p50),
        rt.baseline_name,
        rt.baseline.ops_per_sec(),
        ms(rt.baseline.p50),
        mean_us(rt.ours.ops_per_sec(), 1) - mean_us(rt.baseline.ops_per_sec(), 1)
    );
    s
}
