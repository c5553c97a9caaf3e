//! pg_idempotency benchmarks: each hot path beside its floor, on the same server in the
//! same run, reported as ratios in Markdown.
//!
//!   pg_idempotency_bench --dsn "<conninfo>" [--smoke] [--out docs/benchmarks.md]
//!
//! `--smoke` runs every workload for a moment with tiny data: it checks that the harness
//! works, and says nothing about speed.

mod harness;
mod report;
mod workloads;

use std::time::Duration;

use harness::Plan;

struct Options {
    dsn: String,
    smoke: bool,
    out: Option<String>,
    /// Run only this workload (hashing, churn).
    only: Option<String>,
}

fn options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut o = Options {
        dsn: String::new(),
        smoke: false,
        out: None,
        only: None,
    };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dsn" => o.dsn = args.next().ok_or("--dsn needs a value")?,
            "--out" => o.out = Some(args.next().ok_or("--out needs a value")?),
            "--smoke" => o.smoke = true,
            "--only" => o.only = Some(args.next().ok_or("--only needs a workload name")?),
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
            eprintln!("{e}\nusage: pg_idempotency_bench --dsn <conninfo> [--smoke] [--only hashing|churn] [--out FILE]");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o).await {
        eprintln!("benchmark failed: {e}");
        std::process::exit(1);
    }
}

async fn run(o: &Options) -> Result<(), Box<dyn std::error::Error>> {
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
            rounds: 3,
        }
    };
    let (docs_1k, docs_64k) = if o.smoke { (5, 2) } else { (200, 20) };
    let wanted = |name: &str| o.only.as_deref().is_none_or(|w| w == name);
    let mut rows = Vec::new();
    if wanted("hashing") {
        workloads::hashing::setup(&o.dsn, docs_1k, docs_64k).await?;
        rows.extend(workloads::hashing::run(&o.dsn, plan).await?);
    }
    if rows.iter().any(|r| r.ours.ops == 0 || r.baseline.ops == 0) {
        return Err("a workload completed no operation".into());
    }
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
    let mut markdown = report::markdown(&o.dsn, plan, o.smoke, &rows).await?;
    if wanted("churn") {
        let churned = workloads::churn::run(&o.dsn, churn).await?;
        if churned.calls == 0 {
            return Err("the churn run completed no call".into());
        }
        markdown.push_str(&report::churn(ttl, cycles, &churned));
    }
    match &o.out {
        Some(path) => std::fs::write(path, markdown)?,
        None => print!("{markdown}"),
    }
    Ok(())
}
