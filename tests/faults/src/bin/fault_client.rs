//! One client of the fault suite in a process of its own, so that a scenario can kill it
//! (SIGKILL) or freeze it (SIGSTOP) at any point, as happens to real services. It makes
//! `--calls` calls of keys `k0..k<keys>` chosen by `--seed`: each a begin and, when it
//! claims, the effect in the ledger and the completion (the protocol of run.rs), and
//! prints every operation on stdout as it happens (see lines.rs), on the clock of
//! `--start-epoch-micros`.
//!
//! `--pace-micros` spaces its calls out; `--api rust` makes the begins and completions
//! through the Rust client (PgStore) instead of plain SQL.
//!
//! `--pause-after claim|effect` stops after that step of the first call that reaches it:
//! it prints `paused <t> <key>` and waits for a line on stdin: `go` goes on, `go complete`
//! goes on and completes even when the ledger refused the effect (a stale holder that does
//! not look at the provider's answer: the server must refuse it, IK003).

use std::collections::HashMap;
use std::io::Write;

use pg_idempotency_faults::history::{Op, Outcome};
use pg_idempotency_faults::run::{self, Choices, Conn, Workload};
use pg_idempotency_faults::{lines, rust_client};
use serde_json::json;

struct Args {
    server: String,
    ledger: String,
    workload: Workload,
    process: usize,
    start_epoch_micros: i64,
    pause_after: Option<String>,
    pace: std::time::Duration,
    /// Through the Rust client (PgStore) rather than plain SQL.
    rust: bool,
}

fn args() -> Args {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut named: HashMap<String, String> = HashMap::new();
    for pair in raw.chunks(2) {
        let [name, value] = pair else {
            panic!("arguments come in pairs: --name value; got {raw:?}")
        };
        named.insert(name.trim_start_matches("--").to_string(), value.clone());
    }
    // An argument may also come from the environment: --calls from PGIDEM_CLIENT_CALLS.
    let get = |name: &str| -> Option<String> {
        named.get(name).cloned().or_else(|| {
            let var = format!("PGIDEM_CLIENT_{}", name.replace('-', "_").to_uppercase());
            std::env::var(var).ok()
        })
    };
    let need = |name: &str| get(name).unwrap_or_else(|| panic!("--{name} is required"));
    let number = |name: &str| -> u64 {
        need(name)
            .parse()
            .unwrap_or_else(|e| panic!("--{name}: {e}"))
    };
    Args {
        server: need("server"),
        ledger: need("ledger"),
        workload: Workload {
            processes: 1,
            keys: number("keys") as usize,
            calls_per_process: number("calls") as usize,
            scope: need("scope"),
            lease: get("lease").unwrap_or_else(|| "30 seconds".into()),
            ttl: get("ttl").unwrap_or_else(|| "1 hour".into()),
            seed: number("seed"),
        },
        process: number("process") as usize,
        start_epoch_micros: number("start-epoch-micros") as i64,
        pause_after: get("pause-after"),
        rust: match get("api").as_deref() {
            None | Some("sql") => false,
            Some("rust") => true,
            Some(other) => panic!("--api {other}: sql or rust"),
        },
        pace: std::time::Duration::from_micros(
            get("pace-micros").map_or(0, |p| p.parse().expect("--pace-micros")),
        ),
    }
}

/// Prints one line and flushes it: the parent must see it before the next step starts.
fn say(line: String) {
    let mut out = std::io::stdout().lock();
    // A parent that stopped reading has given up on this process: nothing to do.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Waits for the parent's word: whether to complete even after a refused effect.
async fn pause(t: i64, key: &str) -> bool {
    say(lines::paused(t, key));
    let word = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .unwrap_or_else(|e| panic!("stdin: {e}"))
    .unwrap_or_else(|e| panic!("stdin: {e}"));
    match word.trim() {
        "go" => false,
        "go complete" => true,
        other => panic!("unknown word on stdin: {other:?}"),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = args();
    let w = &a.workload;
    let clock = || lines::since(a.start_epoch_micros);
    let app = format!("application_name={}", run::APPLICATION);
    let mut server = Conn::new(&format!("{} {app}", a.server));
    let mut ledger = Conn::new(&format!("{} {app}", a.ledger));
    let mut choices = Choices::new(w.seed.wrapping_add(a.process as u64 + 1));
    let mut pause_at = a.pause_after.clone();
    for call in 0..w.calls_per_process {
        // The pace of a service between its calls: it spreads a run over several leases,
        // so that calls left in progress by a killed client are taken over in the run.
        if call > 0 && !a.pace.is_zero() {
            tokio::time::sleep(a.pace).await;
        }
        let key = format!("k{}", choices.below(w.keys));

        let c = server.get().await;
        let t = clock();
        say(lines::invoked(t, &key, &Op::Begin));
        let answer = if a.rust {
            rust_client::begin(c, w, &key).await
        } else {
            run::begin(c, w, &key).await
        };
        say(lines::returned(clock(), &key, &answer));
        server.settle(&answer);
        let Outcome::Claimed {
            fence,
            upstream_key,
            ..
        } = answer
        else {
            continue;
        };
        let mut complete_anyway = false;
        if pause_at.as_deref() == Some("claim") {
            pause_at = None;
            complete_anyway = pause(clock(), &key).await;
        }

        let l = ledger.get().await;
        let op = Op::Effect {
            fence,
            upstream_key,
        };
        say(lines::invoked(clock(), &key, &op));
        let applied = pg_idempotency_faults::ledger::apply(l, &key, fence, upstream_key).await;
        say(lines::returned(clock(), &key, &applied));
        ledger.settle(&applied);
        if pause_at.as_deref() == Some("effect") {
            pause_at = None;
            complete_anyway = pause(clock(), &key).await;
        }
        if applied != Outcome::Done && !complete_anyway {
            continue;
        }

        let response = json!({"by": a.process, "fence": fence});
        let c = server.get().await;
        let op = Op::Complete {
            fence,
            response: response.clone(),
        };
        say(lines::invoked(clock(), &key, &op));
        let done = if a.rust {
            rust_client::complete(c, w, &key, fence, &response).await
        } else {
            run::complete(c, w, &key, fence, &response).await
        };
        say(lines::returned(clock(), &key, &done));
        server.settle(&done);
    }
}
