//! pg_idempotency benchmarks: each hot path beside its floor, on the same server in the
//! same run, reported as ratios in Markdown.
//!
//!   pg_idempotency_bench --dsn "<conninfo>" [--proxy-dsn "<conninfo>"]... [--smoke] [--out docs/benchmarks.md]
//!
//! `--smoke` runs every workload for a moment with tiny data: it checks that the harness
//! works, and says nothing about speed.

mod delay;
mod harness;
mod report;
mod workloads;

use std::time::Duration;

use harness::{BenchResult, Plan};

struct Options {
    dsn: String,
    /// A database of the same server with the portable SQL variant installed.
    portable_dsn: Option<String>,
    smoke: bool,
    out: Option<String>,
    /// Run only these workloads.
    only: Vec<String>,
    /// PL/Proxy proxy databases (sql/proxy/) for the sharding workload, in report order.
    proxy_dsns: Vec<String>,
    /// The peers workload's Redis servers on 127.0.0.1: without persistence, and with
    /// `appendfsync always`.
    redis_port: Option<u16>,
    redis_durable_port: Option<u16>,
    /// The peers' interpreters (scripts/peers.sh paths): empty or absent when not installed.
    peers_python: Option<String>,
    peers_node: Option<String>,
    /// Only these rows of the peers workload (their ids, bench/src/workloads/peers/systems.rs).
    peers_rows: Vec<String>,
}

const WORKLOADS: &str =
    "calls, fsync, hot_key, hashing, portable, client, http, mcp, mcp_flood, peers, batch, sharding, sharding_fsync, growth, churn, counts";

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut o = Options {
        dsn: String::new(),
        portable_dsn: None,
        smoke: false,
        out: None,
        only: Vec::new(),
        proxy_dsns: Vec::new(),
        redis_port: None,
        redis_durable_port: None,
        peers_python: None,
        peers_node: None,
        peers_rows: Vec::new(),
    };
    let port = |v: Option<String>, name: &str| -> Result<Option<u16>, String> {
        let v = v.ok_or(format!("{name} needs a value"))?;
        if v.is_empty() {
            return Ok(None);
        }
        v.parse()
            .map(Some)
            .map_err(|_| format!("{name}: not a port: {v}"))
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dsn" => o.dsn = args.next().ok_or("--dsn needs a value")?,
            "--portable-dsn" => {
                o.portable_dsn = Some(args.next().ok_or("--portable-dsn needs a value")?)
            }
            "--proxy-dsn" => o
                .proxy_dsns
                .push(args.next().ok_or("--proxy-dsn needs a value")?),
            "--redis-port" => o.redis_port = port(args.next(), "--redis-port")?,
            "--redis-durable-port" => {
                o.redis_durable_port = port(args.next(), "--redis-durable-port")?
            }
            "--peers-python" => {
                o.peers_python = Some(args.next().ok_or("--peers-python needs a value")?)
            }
            "--peers-node" => o.peers_node = Some(args.next().ok_or("--peers-node needs a value")?),
            "--peers-row" => o
                .peers_rows
                .push(args.next().ok_or("--peers-row needs a row id")?),
            "--out" => o.out = Some(args.next().ok_or("--out needs a value")?),
            "--smoke" => o.smoke = true,
            "--only" => o
                .only
                .push(args.next().ok_or("--only needs a workload name")?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.dsn.is_empty() {
        return Err("--dsn is required".into());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\nusage: pg_idempotency_bench --dsn <conninfo> [--portable-dsn <conninfo>] [--proxy-dsn <conninfo>]... [--redis-port N] [--redis-durable-port N] [--peers-python PATH] [--peers-node PATH] [--smoke] [--only <workload>]... [--out FILE]\nworkloads: {WORKLOADS}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o).await {
        // tokio-postgres says "db error" and keeps the server's message in its source.
        let mut message = e.to_string();
        let mut source = e.source();
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        eprintln!("benchmark failed: {message}");
        std::process::exit(1);
    }
}

/// Runs `f` with `fsync = off` on the server (a reload, no restart), and turns it back on
/// whatever happens.
async fn without_fsync<T>(
    dsn: &str,
    f: impl std::future::Future<Output = BenchResult<T>>,
) -> BenchResult<T> {
    let c = harness::connect(dsn).await?;
    c.batch_execute("ALTER SYSTEM SET fsync = off").await?;
    c.batch_execute("SELECT pg_reload_conf()").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let result = f.await;
    c.batch_execute("ALTER SYSTEM RESET fsync").await?;
    c.batch_execute("SELECT pg_reload_conf()").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    result
}

/// The added round-trip times of the peers workload: loopback through the forwarder, a
/// fast same-zone network, and a slower one (another zone, a busy proxy).
const RTTS: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_micros(200),
    Duration::from_millis(1),
];

async fn run(o: &Options) -> BenchResult<()> {
    let plan = if o.smoke {
        Plan {
            clients: 1,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(200),
            rounds: 1,
        }
    } else {
        Plan {
            clients: 1,
            warmup: Duration::from_secs(2),
            duration: Duration::from_secs(5),
            // fsync latency on a small VM moves 10-20% between runs: average over more.
            rounds: 5,
        }
    };
    let (docs_1k, docs_64k) = if o.smoke { (5, 2) } else { (200, 20) };
    let wanted = |name: &str| o.only.is_empty() || o.only.iter().any(|w| w == name);
    let mut dsns = vec![o.dsn.as_str()];
    dsns.extend(o.portable_dsn.as_deref());

    let mut rows = Vec::new();
    workloads::calls::setup(&dsns).await?;
    if wanted("calls") {
        rows.extend(workloads::calls::run_claims(&o.dsn, plan, "", 0.85).await?);
        rows.extend(workloads::calls::run_replay_and_naive(&o.dsn, plan).await?);
    }
    if wanted("fsync") {
        let fsync_rows = without_fsync(
            &o.dsn,
            workloads::calls::run_claims(&o.dsn, plan, ", `fsync = off`", 0.7),
        )
        .await?;
        rows.extend(fsync_rows);
    }
    if wanted("hashing") || wanted("portable") {
        for dsn in &dsns {
            workloads::hashing::setup(dsn, docs_1k, docs_64k).await?;
        }
    }
    if wanted("hashing") {
        rows.extend(workloads::hashing::run(&o.dsn, plan).await?);
    }
    if wanted("portable") {
        match &o.portable_dsn {
            Some(p) => rows.extend(workloads::calls::run_portable(p, &o.dsn, plan).await?),
            None => eprintln!("no --portable-dsn: the portable variant is not measured"),
        }
    }
    if wanted("client") {
        rows.extend(workloads::client_overhead::run(&o.dsn, plan).await?);
    }
    if let Some(r) = rows.iter().find(|r| r.ours.ops == 0 || r.baseline.ops == 0) {
        return Err(format!("workload '{}' completed no operation", r.workload).into());
    }
    // A run of workloads that have sections of their own only (--only peers, say) holds
    // those sections, without an empty table of the others.
    let mut markdown = if rows.is_empty() && !o.only.is_empty() {
        report::title(o.smoke)
    } else {
        report::markdown(&o.dsn, plan, o.smoke, &rows).await?
    };

    if wanted("http") {
        let replay_keys = if o.smoke { 20 } else { 1000 };
        let http = workloads::http::run(&o.dsn, plan, replay_keys).await?;
        if let Some(r) = http.iter().find(|r| r.ours.ops == 0 || r.baseline.ops == 0) {
            return Err(format!("'{}' completed no request", r.ours_name).into());
        }
        markdown.push_str(&report::http(&http));
    }

    if wanted("mcp") {
        let mcp_plan = if o.smoke {
            workloads::mcp::McpPlan {
                warmup: 2,
                calls: 4,
                rounds: 2,
                replay_keys: 2,
            }
        } else {
            workloads::mcp::McpPlan {
                warmup: 50,
                calls: 1000,
                rounds: 5,
                replay_keys: 100,
            }
        };
        let mut backends = vec![("extension", o.dsn.as_str())];
        backends.extend(o.portable_dsn.as_deref().map(|p| ("portable SQL", p)));
        let outcome = workloads::mcp::run(&backends, mcp_plan).await?;
        match &outcome {
            workloads::mcp::Outcome::Skipped(reason) => eprintln!("mcp: skipped: {reason}"),
            workloads::mcp::Outcome::Measured { rows, .. } => {
                if let Some(r) = rows.iter().find(|r| r.ours.ops == 0 || r.baseline.ops == 0) {
                    return Err(format!("'{}' completed no call", r.ours_name).into());
                }
            }
        }
        markdown.push_str(&report::mcp(&outcome, mcp_plan));
    }

    if wanted("mcp_flood") {
        let flood_plan = if o.smoke {
            workloads::mcp_flood::FloodPlan {
                warmup: 2,
                calls: 4,
                rounds: 1,
                crowd: 8,
                pool_size: 4,
            }
        } else {
            workloads::mcp_flood::FloodPlan {
                warmup: 50,
                calls: 300,
                rounds: 6,
                crowd: 32,
                pool_size: 4,
            }
        };
        let outcome = workloads::mcp_flood::run(&o.dsn, flood_plan).await?;
        match &outcome {
            workloads::mcp_flood::Outcome::Skipped(reason) => {
                eprintln!("mcp_flood: skipped: {reason}")
            }
            workloads::mcp_flood::Outcome::Measured(f) => {
                if f.quiet.ops == 0 || f.flooded.ops == 0 {
                    return Err("mcp_flood completed no call".into());
                }
            }
        }
        markdown.push_str(&report::mcp_flood::section(&outcome, flood_plan));
    }

    if wanted("peers") {
        let peers_plan = if o.smoke {
            workloads::peers::PeersPlan {
                warmup: Duration::from_millis(50),
                duration: Duration::from_millis(200),
                hot: vec![(8, 1)],
                failure_keys: 2,
                retries: 3,
                count_calls: 10,
                rounds: 1,
                // One setting: the smoke checks that every row runs, not how distance
                // changes it (the test command's time is counted).
                rtts: vec![Duration::ZERO],
            }
        } else {
            workloads::peers::PeersPlan {
                warmup: Duration::from_millis(500),
                duration: Duration::from_secs(2),
                hot: vec![(8, 20), (64, 10)],
                failure_keys: 20,
                retries: 4,
                count_calls: 100,
                rounds: 3,
                rtts: RTTS.to_vec(),
            }
        };
        let peers = workloads::peers::PeersOptions {
            dsn: &o.dsn,
            portable_dsn: o.portable_dsn.as_deref(),
            redis_port: o.redis_port,
            redis_durable_port: o.redis_durable_port,
            python: o.peers_python.clone(),
            node: o.peers_node.clone(),
            rows: o.peers_rows.clone(),
        };
        let outcome = workloads::peers::run(&peers, peers_plan).await?;
        if let workloads::peers::Outcome::Skipped(reason) = &outcome {
            eprintln!("peers: skipped: {reason}");
        }
        markdown.push_str(&report::peers::section(&outcome));
    }

    if wanted("batch") {
        let config: tokio_postgres::Config = o.dsn.parse()?;
        let port = *config.get_ports().first().unwrap_or(&5432);
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let (rtts, sizes) = if o.smoke {
            (vec![Duration::ZERO], vec![10])
        } else {
            (
                vec![Duration::ZERO, Duration::from_millis(1)],
                vec![10, 100],
            )
        };
        let mut measured =
            workloads::batch::run(&o.dsn, "extension", upstream, plan, &rtts, &sizes).await?;
        if let Some(p) = &o.portable_dsn {
            measured.extend(
                workloads::batch::run(p, "portable SQL", upstream, plan, &rtts, &sizes).await?,
            );
        }
        if let Some(m) = measured
            .iter()
            .find(|m| m.row.ours.ops == 0 || m.row.baseline.ops == 0)
        {
            return Err(format!("batch: '{}' completed no call", m.row.workload).into());
        }
        markdown.push_str(&report::batch::batch(&measured, plan));
    }

    for (name, fsync) in [("sharding", true), ("sharding_fsync", false)] {
        if !wanted(name) {
            continue;
        }
        let outcome = match (fsync, o.proxy_dsns.first()) {
            (false, Some(server)) => {
                without_fsync(server, workloads::sharding::run(&o.proxy_dsns, plan)).await?
            }
            _ => workloads::sharding::run(&o.proxy_dsns, plan).await?,
        };
        match &outcome {
            workloads::sharding::Outcome::Skipped(reason) => {
                eprintln!("{name}: skipped: {reason}")
            }
            workloads::sharding::Outcome::Measured(r) => {
                let empty = r.measured.iter().flat_map(|m| &m.rows).map(|(_, r)| r);
                if let Some(r) = empty
                    .chain([&r.routing])
                    .find(|r| r.ours.ops == 0 || r.baseline.ops == 0)
                {
                    return Err(format!("{name}: '{}' completed no call", r.workload).into());
                }
            }
        }
        markdown.push_str(&report::sharding(&outcome, plan, fsync));
    }

    if wanted("hot_key") {
        let (sessions, rounds) = if o.smoke { (8, 2) } else { (64, 50) };
        let hot = workloads::hot_key::run(&o.dsn, sessions, rounds).await?;
        markdown.push_str(&report::hot_key(&hot));
        if hot.one_claim != hot.rounds {
            return Err(format!(
                "hot key: {} of {} rounds had exactly one claim",
                hot.one_claim, hot.rounds
            )
            .into());
        }
    }
    if wanted("growth") {
        let (small, large) = if o.smoke {
            (1_000, 5_000)
        } else {
            (10_000, 10_000_000)
        };
        let growth_plan = Plan {
            clients: 1,
            warmup: plan.warmup,
            duration: plan.duration,
            rounds: 2.min(plan.rounds),
        };
        let grown = workloads::growth::run(&o.dsn, growth_plan, small, large).await?;
        markdown.push_str(&report::growth(&grown));
    }
    if wanted("churn") {
        let churn = workloads::churn::Churn {
            ttl: if o.smoke {
                Duration::from_millis(200)
            } else {
                Duration::from_secs(20)
            },
            cycles: 10,
            writers: 2,
            purge_every: if o.smoke {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(2)
            },
        };
        let (ttl, cycles) = (churn.ttl, churn.cycles);
        let churned = workloads::churn::run(&o.dsn, churn).await?;
        if churned.calls == 0 {
            return Err("the churn run completed no call".into());
        }
        markdown.push_str(&report::churn(ttl, cycles, &churned));
    }
    if wanted("counts") {
        let (scopes, records) = if o.smoke {
            (100, 1_000)
        } else {
            (100_000, 10_000_000)
        };
        let scrape_plan = Plan {
            clients: 1,
            warmup: plan.warmup,
            duration: plan.duration,
            rounds: 2.min(plan.rounds),
        };
        let counted = workloads::counts::run(
            &o.dsn,
            o.portable_dsn.as_deref(),
            scrape_plan,
            Plan {
                clients: if o.smoke { 1 } else { 4 },
                ..plan
            },
            scopes,
            records,
        )
        .await?;
        markdown.push_str(&report::counts(&counted));
    }
    match &o.out {
        Some(path) => std::fs::write(path, markdown)?,
        None => print!("{markdown}"),
    }
    Ok(())
}
