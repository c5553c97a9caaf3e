//! The "Against the peers" section: the machine and every peer's version, what each delay
//! setting really adds, round trips per call, each language's rows at each setting with
//! the ratio of ours to each peer (and the reason beside every row where a peer is
//! faster), hot keys and failures with the executions counted, and what each peer
//! guarantees beside what we do.

use std::fmt::Write;
use std::time::Duration;

use super::{cpu, ms};
use crate::workloads::peers::cases::{Case, Measured};
use crate::workloads::peers::systems::{by_id, Lang, Store, System, PAIRS, SYSTEMS};
use crate::workloads::peers::{Outcome, PeersReport, RowResult, RttRun};

fn rtt_name(d: Duration) -> String {
    format!("{} ms", d.as_secs_f64() * 1000.0)
}

fn row_name(s: &System) -> String {
    format!("{} ({})", s.name, s.store.name())
}

/// The figures of one case of one row at one setting; a row in memory is looked up in the
/// first setting, the only one it runs at.
fn find<'a>(
    report: &'a PeersReport,
    run: &'a RttRun,
    id: &str,
    pick: impl Fn(&Case) -> bool,
) -> Option<&'a Measured> {
    let in_run = |r: &'a RttRun| {
        r.rows.iter().find_map(|(s, res)| match res {
            RowResult::Measured(cases) if s.id == id => {
                cases.iter().find(|(c, _)| pick(c)).map(|(_, m)| m)
            }
            _ => None,
        })
    };
    in_run(run).or_else(|| report.runs.first().and_then(in_run))
}

fn is_new(c: &Case) -> bool {
    matches!(c, Case::New { .. })
}
fn is_replay(c: &Case) -> bool {
    matches!(c, Case::Replay { .. })
}

fn outcomes(m: &Measured) -> String {
    m.outcomes
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the code of each row does per call, as read (bench/peers/ and the peers' sources
/// in their installed packages); the table beside it gives what the forwarder counted.
fn round_trips_by_reading(id: &str) -> &'static str {
    match id {
        "py-ours" | "py-sql-asyncpg" | "node-ours" | "rust-pgstore" | "rust-pgstore-portable" => {
            "new: `idem_begin`, `idem_complete` (2); replay: `idem_begin` (1)"
        }
        "py-pkg-psycopg" => {
            "new: `idem_begin`, `idem_complete` (2); replay: `idem_begin` (1); the pool hands its connection over without a statement (psycopg prepares each statement at its fifth use: one more, once per connection)"
        }
        "py-pkg-asyncpg" => {
            "new: `idem_begin`, `idem_complete` (2); replay: `idem_begin` (1); the store keeps the pool's connection between calls, so asyncpg's reset on release (`UNLISTEN *`, `RESET ALL`, ...) is sent only when it gives it back, 0.1 s after its last call"
        }
        "py-idemkit" => {
            "new: `INSERT ... ON CONFLICT DO NOTHING RETURNING *`, then `BEGIN`, `UPDATE ... WHERE claim_token`, `SELECT pg_notify`, `COMMIT`, and asyncpg's reset after each of the two pool checkouts (7); replay: the `INSERT` that inserts nothing, the `UPDATE` that reclaims a lapsed lease, the `UPDATE` that renews an expired record, `SELECT *`, the reset (5)"
        }
        "rust-redisstore" | "rust-redisstore-durable" => {
            "new: the begin script, the completion script, each one `EVALSHA` (2); replay: the begin script (1)"
        }
        "py-powertools" | "py-powertools-durable" => {
            "new: `SET NX EX` (in progress), `SET EX` (completed) (2); replay: `SET NX EX` refused, `GET` to see why, `GET` again in `_get_idempotency_record` (3)"
        }
        "node-idempotency" | "node-idempotency-durable" => {
            "new: `SET NX PX` (in progress), `SET PX` (complete) (2); replay: `SET NX PX` refused, `GET` (2)"
        }
        "node-ours-express" => {
            "one HTTP request on 127.0.0.1 (not delayed), then as the SQL API: 2 for a new key, 1 for a replay"
        }
        "node-express-idempotency" => "none: its store is in the process (one HTTP request on 127.0.0.1)",
        "py-naive" | "node-naive" | "rust-naive" => {
            "new: `SELECT`, `INSERT ... ON CONFLICT DO NOTHING`, `UPDATE` (3); replay: `SELECT` (1)"
        }
        _ => "",
    }
}

/// Why a peer is faster than ours on a case, where it is: what it does not pay for.
fn why_faster(ours: &System, peer: &System, replay: bool, hot_runs: &str) -> String {
    match peer.store {
        Store::Redis => "Redis without persistence answers from memory and writes nothing to disk: a restart loses every record, acknowledged ones included, and a running call can then run again; ours is answered only once PostgreSQL has flushed the claim's and the completion's WAL".into(),
        Store::RedisDurable => "both flush each write before answering (Redis `appendfsync always` fsyncs its append-only file per write); Redis's write is one key in memory and one appended line, ours a function call in a transaction that checks the key's state, writes a row and its index entry and flushes the WAL".into(),
        Store::Memory => "express-idempotency keeps its records in the Node.js process's memory: no network and nothing durable, and a second process (a restart, a second instance) knows none of them; ours goes to PostgreSQL over the network and commits the claim and the completion".into(),
        _ if peer.id == "py-sql-asyncpg" || peer.id == "py-ours" => {
            "the SQL API by hand: the same statements, without the package's work around them (the arguments bound to the function's parameters, the key taken from them, the call's context and bookkeeping, the pool), and its `idem_begin` asks for the 4 columns it reads where the package's asks for every one a call may need".into()
        }
        _ if peer.id == "py-idemkit" => {
            "idemkit's claim is a plain `INSERT` into its own table, without a function call, a role or policy check, or an expiry decision".into()
        }
        _ if peer.id.ends_with("naive") => {
            if replay {
                "the naive replay is a plain `SELECT` by key; ours is a function call that also decides expiry, the role's ownership and the policy, and counts the outcome".into()
            } else if matches!(ours.store, Store::Redis | Store::RedisDurable) {
                format!("the naive pattern writes to PostgreSQL without a fence, a lease, an expiry check or a script; {hot_runs}")
            } else {
                format!("the naive pattern runs plain statements without a fence, a lease, an expiry check or a role check (and without `SECURITY DEFINER` function calls); {hot_runs}")
            }
        }
        _ => "".into(),
    }
}

fn hot_executions(report: &PeersReport, id: &str) -> (u64, u64) {
    let mut ex = (0, 0);
    for run in &report.runs {
        for (s, r) in &run.rows {
            if let (true, RowResult::Measured(cases)) = (s.id == id, r) {
                for (c, m) in cases {
                    if matches!(c, Case::Hot { .. }) {
                        ex.0 += m.executions;
                        ex.1 += m.keys;
                    }
                }
            }
        }
    }
    ex
}

fn failure_executions(report: &PeersReport, id: &str) -> Option<(u64, u64)> {
    let run = report.runs.first()?;
    let m = find(report, run, id, |c| matches!(c, Case::Failure { .. }))?;
    Some((m.executions, m.keys))
}

pub fn section(outcome: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Against the peers\n");
    let r = match outcome {
        Outcome::Skipped(reason) => {
            let _ = writeln!(s, "Skipped: {reason}.");
            return s;
        }
        Outcome::Measured(r) => r,
    };
    intro(&mut s, r);
    rtts(&mut s, r);
    round_trips(&mut s, r);
    for lang in [Lang::Python, Lang::Node, Lang::Rust] {
        language(&mut s, r, lang);
    }
    hot(&mut s, r);
    failures(&mut s, r);
    guarantees(&mut s, r);
    s
}

fn intro(s: &mut String, r: &PeersReport) {
    let p = &r.plan;
    let hot: Vec<String> = p
        .hot
        .iter()
        .map(|(n, rounds)| format!("{n} duplicates × {rounds} keys"))
        .collect();
    let _ = writeln!(s, "Written by `scripts/bench.sh --only peers`. pg_idempotency beside what a user would use otherwise, each peer installed by the benchmark's setup from its registry at a pinned version (scripts/peers.sh: bench/peers/python/requirements.txt, bench/peers/node/package-lock.json), all run on this machine in this run, with the same cases: **new keys** (claim, a no-op body, complete; one call after another for {:?} after a {:?} warm-up); **replays** of one of 100 completed keys (the same); a **hot key** ({}) whose duplicates a barrier releases together, counting how many times the body really ran; a **failure**: a body that fails, then {} retries of the same key, for {} keys. The drivers (bench/peers/python/driver.py, bench/peers/node/driver.js) time each call in the caller's own language and print JSON that the benchmark reads; the Rust rows run in the benchmark. Every row whose store is over the network (PostgreSQL, Redis) reaches it through the benchmark's delay forwarder (bench/src/delay.rs), at each added round-trip time below, 0 ms included so that every setting pays the same hop. A ratio is ours / the peer in calls per second, in one language: above 1, ours is faster.\n", p.duration, p.warmup, hot.join(" and "), p.retries, p.failure_keys);
    let _ = writeln!(s, "- machine: {}; load average {} at the start, {} at the end (1, 5, 15 min: other work on the machine shows here); the rows take turns, {} round(s) per setting, so that a slow moment of the shared disk falls on all of them: compare the rows of one setting with each other rather than with other sections", cpu(), r.load.0, r.load.1, r.plan.rounds);
    let _ = writeln!(
        s,
        "- PostgreSQL: {} ({}), as scripts/bench.sh runs it",
        r.server, r.settings
    );
    if let Some(v) = &r.redis_version {
        let _ = writeln!(s, "- Redis {v}: one without persistence (`--save \"\" --appendonly no`, scripts/redis.sh), one with `appendonly yes` and `appendfsync always` (scripts/redis-durable.sh): durability stands next to speed");
    }
    let versions: Vec<String> = r
        .versions
        .iter()
        .map(|(k, v)| format!("`{k}` {v}"))
        .collect();
    let _ = writeln!(s, "- versions: {}", versions.join(", "));
    let _ = writeln!(
        s,
        "- run on its own (`--only peers`), not in the same run as the sections above\n"
    );
    let _ = writeln!(s, "Peers that could not be used as their users would like: `@node-idempotency` has storage adapters for Redis and memory only on npm (`@node-idempotency/storage-adapter-redis`, `-memory`; no PostgreSQL adapter exists under `@node-idempotency/`), so it runs on Redis; express-idempotency 1.0.6 ships an in-memory store and points to a third-party MongoDB adapter (no MongoDB here), so it is measured as it ships, in memory, behind an express route called over HTTP on 127.0.0.1, beside our SQL API in the same kind of route (its row runs once: it crosses no network, so the delay does not apply). Powertools runs outside Lambda, so it has no remaining time to set an in-progress expiry. idemkit's PostgreSQL backend keeps its records in a table of its own, which its `init_pg` (`idemkit init-pg`) makes in the same database; its decorator is asyncio only (`idempotent_sync` runs the same on a background event loop), over asyncpg, so beside it stands our `@idempotent` on an `async def` with an `AsyncStore` over an asyncpg pool, and the SQL API by hand from asyncpg. Every Python row of ours names its key as the SQL rows pass it (`key_fields=[\"key\"]`, EXPLICIT; idemkit the same) and remembers a failure (`cache_failures=True`; idemkit `cache_exceptions`); idemkit runs with its defaults otherwise (`use_local_cache` off: every call asks the database).\n");
}

fn rtts(s: &mut String, r: &PeersReport) {
    let _ = writeln!(s, "What each setting adds, measured: the median of 200 `SELECT 1` (PostgreSQL) or `PING` (Redis) through the forwarder minus the same sent directly, alternating. The forwarder delivers each chunk half the round trip after it arrived, in each direction (OS threads with a 1 µs timer slack and a short spin: tokio's timer has 1 ms granularity); at 0 ms what remains is its own hop.\n");
    let _ = writeln!(
        s,
        "| target added RTT | measured, PostgreSQL | measured, Redis |"
    );
    let _ = writeln!(s, "|---|---|---|");
    for run in &r.runs {
        let _ = writeln!(
            s,
            "| {} | {} ms | {} |",
            rtt_name(run.target),
            ms(run.added_pg),
            run.added_redis
                .map(|d| format!("{} ms", ms(d)))
                .unwrap_or_else(|| "no Redis".into())
        );
    }
}

fn round_trips(s: &mut String, r: &PeersReport) {
    let _ = writeln!(s, "\nRound trips per call. Counted: the forwarder counts request turns (a chunk from the client after the server has answered starts one), over {} calls at 0 ms after one call to connect, minus a run of none. By reading: the statements or commands the row's code sends, from bench/peers/ and the peers' installed sources. Latency growth: (p50 at {} − p50 at 0 ms) / (the measured RTT added between them), i.e. the round trips the latency paid.\n", r.plan.count_calls, rtt_name(*r.plan.rtts.last().unwrap_or(&Duration::ZERO)));
    let _ = writeln!(s, "| row | counted: new key | counted: replay | latency growth: new | replay | by reading the code |");
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let (first, last) = (r.runs.first(), r.runs.last());
    for (system, counted) in &r.round_trips {
        let growth = |pick: fn(&Case) -> bool| -> String {
            let (Some(a), Some(b)) = (first, last) else {
                return "".into();
            };
            if !system.store.networked() || a.target == b.target {
                return "n/a".into();
            }
            let added = |run: &RttRun| match system.store {
                Store::Redis | Store::RedisDurable => run.added_redis.unwrap_or(run.target),
                _ => run.added_pg,
            };
            let (Some(ma), Some(mb)) = (find(r, a, system.id, pick), find(r, b, system.id, pick))
            else {
                return "".into();
            };
            let d = mb.stats.p50.as_secs_f64() - ma.stats.p50.as_secs_f64();
            let per = (added(b).as_secs_f64() - added(a).as_secs_f64()).max(1e-9);
            format!("{:.1}", d / per)
        };
        let (n, rp) = match counted {
            Some((n, rp)) => (format!("{n:.2}"), format!("{rp:.2}")),
            None if !system.store.networked() => ("n/a".into(), "n/a".into()),
            None => ("skipped".into(), "skipped".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {n} | {rp} | {} | {} | {} |",
            row_name(system),
            growth(is_new),
            growth(is_replay),
            round_trips_by_reading(system.id)
        );
    }
}

fn language(s: &mut String, r: &PeersReport, lang: Lang) {
    let _ = writeln!(s, "\n### {}\n", lang.name());
    let _ = writeln!(
        s,
        "| added RTT | row | new: calls/s | p50 ms | p99 ms | replay: calls/s | p50 ms | p99 ms |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    let mut skipped = Vec::new();
    for run in &r.runs {
        for (system, res) in &run.rows {
            if system.lang != lang {
                continue;
            }
            match res {
                RowResult::Skipped(reason) => {
                    if run.target.is_zero() {
                        skipped.push(format!("{}: skipped: {reason}", row_name(system)));
                    }
                }
                RowResult::Measured(_) => {
                    let (Some(n), Some(p)) = (
                        find(r, run, system.id, is_new),
                        find(r, run, system.id, is_replay),
                    ) else {
                        continue;
                    };
                    let rtt = if system.store.networked() {
                        rtt_name(run.target)
                    } else {
                        "none (in process)".into()
                    };
                    let _ = writeln!(
                        s,
                        "| {rtt} | {} | {:.0} | {} | {} | {:.0} | {} | {} |",
                        row_name(system),
                        n.stats.ops_per_sec(),
                        ms(n.stats.p50),
                        ms(n.stats.p99),
                        p.stats.ops_per_sec(),
                        ms(p.stats.p50),
                        ms(p.stats.p99)
                    );
                }
            }
        }
    }
    for line in &skipped {
        let _ = writeln!(s, "\n{line}.");
    }
    let _ = writeln!(s, "\n| added RTT | ours | peer | new: ratio | replay: ratio | where the peer is faster, why |");
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for run in &r.runs {
        for (ours_id, peer_id) in PAIRS {
            let (Some(ours), Some(peer)) = (by_id(ours_id), by_id(peer_id)) else {
                continue;
            };
            if ours.lang != lang {
                continue;
            }
            let ratio = |pick: fn(&Case) -> bool| -> Option<f64> {
                let a = find(r, run, ours_id, pick)?.stats.ops_per_sec();
                let b = find(r, run, peer_id, pick)?.stats.ops_per_sec();
                (b > 0.0).then(|| a / b)
            };
            let (Some(new), Some(replay)) = (ratio(is_new), ratio(is_replay)) else {
                continue;
            };
            let (hx, hk) = hot_executions(r, peer_id);
            let hot_runs = format!("its body ran {hx} times for {hk} hot keys in this run");
            let mut why = Vec::new();
            let (wn, wr) = (
                why_faster(ours, peer, false, &hot_runs),
                why_faster(ours, peer, true, &hot_runs),
            );
            match (new < 1.0, replay < 1.0) {
                (true, true) if wn == wr => why.push(format!("new keys and replays: {wn}")),
                (n, r) => {
                    if n {
                        why.push(format!("new keys: {wn}"));
                    }
                    if r {
                        why.push(format!("replays: {wr}"));
                    }
                }
            }
            let _ = writeln!(
                s,
                "| {} | {} | {} | {new:.2}x | {replay:.2}x | {} |",
                rtt_name(run.target),
                row_name(ours),
                row_name(peer),
                if why.is_empty() {
                    "ours is faster".into()
                } else {
                    why.join("; ")
                }
            );
        }
    }
}

fn hot(s: &mut String, r: &PeersReport) {
    let _ = writeln!(s, "\n### Hot key: how many times the body ran\n");
    let _ = writeln!(s, "Each round a new key; its duplicates wait on one barrier (threads in Python, asyncio tasks on one `Event` for the asyncio rows, async tasks on one promise in Node.js, tokio tasks on one `Barrier` in Rust), each on its own connection where the client has one per caller (psycopg, asyncpg by hand, node-postgres, `PgStore`'s pool, the naive rows; the Python package's rows and idemkit share their pool, and the Redis clients multiplex one connection, as they are used). One execution per key is the goal. The answers are the duplicates' as the client saw them, over every setting (`ok` for Powertools and the express routes counts replays too: they return the stored result as if the call ran). p50 is the duplicates' call time from the barrier, at 0 ms.\n");
    let settings: Vec<String> = r.runs.iter().map(|run| rtt_name(run.target)).collect();
    let _ = write!(s, "| row | duplicates |");
    for name in &settings {
        let _ = write!(s, " executions / keys, {name} |");
    }
    let _ = writeln!(s, " answers | p50 ms, 0 ms |");
    let _ = writeln!(s, "|---|---|{}---|---|", "---|".repeat(settings.len()));
    for system in SYSTEMS {
        // A row left out of the run (`--peers-row`) has no line, the in-memory one included.
        if !r
            .runs
            .iter()
            .any(|run| run.rows.iter().any(|(sys, _)| sys.id == system.id))
        {
            continue;
        }
        for &(concurrency, _) in &r.plan.hot {
            let pick =
                |c: &Case| matches!(c, Case::Hot { concurrency: n, .. } if *n == concurrency);
            let mut cells = Vec::new();
            let mut answers = std::collections::BTreeMap::new();
            let mut p50 = None;
            for (i, run) in r.runs.iter().enumerate() {
                let here = run.rows.iter().any(|(sys, _)| sys.id == system.id);
                let m = if here {
                    find(r, run, system.id, pick)
                } else {
                    None
                };
                match m {
                    Some(m) => {
                        let more = if m.executions > m.keys {
                            " **(more)**"
                        } else {
                            ""
                        };
                        cells.push(format!("{} / {}{more}", m.executions, m.keys));
                        for (k, v) in &m.outcomes {
                            *answers.entry(k.clone()).or_insert(0) += v;
                        }
                        if i == 0 {
                            p50 = Some(m.stats.p50);
                        }
                    }
                    None if !system.store.networked() && i > 0 => cells.push("(no network)".into()),
                    None => cells.push("".into()),
                }
            }
            if cells.iter().all(|c| c.is_empty()) {
                continue;
            }
            let answers: Vec<String> = answers.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(
                s,
                "| {} | {concurrency} | {} | {} | {} |",
                row_name(system),
                cells.join(" | "),
                answers.join(", "),
                p50.map(ms).unwrap_or_default()
            );
        }
    }
}

fn failures(s: &mut String, r: &PeersReport) {
    let Some(run) = r.runs.first() else { return };
    let _ = writeln!(s, "\n### A failure, retried\n");
    let _ = writeln!(s, "At {}: a body that fails, then {} retries of the same key, for {} keys. Ours completes the claim with `succeeded = false, cache_failure = true` and replays the failure; node-idempotency stores whatever `onResponse` is given, an `error` included; Powertools deletes the record when the function raises (its documented behaviour: failures are not cached), and express-idempotency forgets a non-2xx answer, so a retry runs the body again. The naive pattern has no failure handling to measure.\n", rtt_name(run.target), r.plan.retries, r.plan.failure_keys);
    let _ = writeln!(
        s,
        "| row | executions / keys | retries were told | retry p50 ms | p99 ms |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for system in SYSTEMS {
        let Some(m) = find(r, run, system.id, |c| matches!(c, Case::Failure { .. })) else {
            continue;
        };
        let _ = writeln!(
            s,
            "| {} | {} / {} | {} | {} | {} |",
            row_name(system),
            m.executions,
            m.keys,
            outcomes(m),
            ms(m.stats.p50),
            ms(m.stats.p99)
        );
    }
}

fn measured_hot(r: &PeersReport, id: &str) -> String {
    let (x, k) = hot_executions(r, id);
    if k == 0 {
        return "not measured (skipped)".into();
    }
    format!("measured: {x} executions for {k} hot keys")
}

fn measured_failure(r: &PeersReport, id: &str) -> String {
    match failure_executions(r, id) {
        Some((x, k)) => format!(
            "measured: {x} executions for {k} failing keys with {} retries each",
            r.plan.retries
        ),
        None => "not measured (skipped)".into(),
    }
}

/// One line of a peer's table: the guarantee, the peer's cell, ours.
type Guarantee = (&'static str, String, String);

fn guarantees(s: &mut String, r: &PeersReport) {
    let _ = writeln!(
        s,
        "\n### What each peer guarantees, beside pg_idempotency\n"
    );
    let _ = writeln!(s, "Each cell says where it comes from: *code* (the peer's installed source, read for this table: Powertools' `idempotency/base.py` and `persistence/redis.py`, `@node-idempotency/core`'s `idempotency.js` with its Redis adapter, express-idempotency's `idempotencyService.js` and `inMemoryDataAdapter.js`, idemkit's `backends/postgres.py`, `core/runner.py` and `adapters/ai.py`; ours: docs/sql-api.md), *docs* (the peer's README or documentation) or *measured* (this run).\n");
    let ours_hot = measured_hot(r, "py-ours");
    let ours_fail = measured_failure(r, "py-ours");
    let tables: [(&str, &str, [Guarantee; 5]); 5] = [
        ("idemkit (Python), PostgreSQL backend", "py-idemkit", [
            ("durability", "PostgreSQL's, as ours: its own table; the claim an autocommit `INSERT`, the completion a transaction with its `pg_notify` (*code*)".into(), "the same".into()),
            ("one execution on a hot key", format!("`INSERT ... ON CONFLICT DO NOTHING` claims once; a duplicate waits for the result (`LISTEN`/`NOTIFY` and a backed-off poll, 10 s at most) and replays it (*code*, *docs*); {}", measured_hot(r, "py-idemkit")), format!("one `claimed` per key; a duplicate is told `in_progress` unless the decorator has `wait=` (*docs*); {} (the `AsyncStore` row)", measured_hot(r, "py-pkg-asyncpg"))),
            ("fencing: a stale holder cannot complete", "yes: the completion's `UPDATE` names the claim's token, and a lapsed lease is reclaimed with a new one; a heartbeat renews the lease while the function runs (*code*)".into(), "yes: `idem_complete` with a stale fence raises *lease lost* (*docs*)".into()),
            ("lost-reply recovery", "yes: a retry replays the stored result (*code*, and the replay rows above)".into(), "yes (*docs*)".into()),
            ("failure caching", format!("by choice: a raised exception releases the claim unless its type is in `cache_exceptions`, as here (*code*, *docs*); {}", measured_failure(r, "py-idemkit")), format!("by choice (`cache_failures`) (*docs*); {}", measured_failure(r, "py-pkg-asyncpg"))),
        ]),
        ("AWS Powertools for Lambda (Python), Redis persistence layer", "py-powertools", [
            ("durability", "Redis's: none without persistence; with `appendfsync always` each SET is fsync'd before the answer (*code*: plain `SET`s)".into(), "a claim and a completion are acknowledged once committed with `synchronous_commit = on` (*docs*)".into()),
            ("one execution on a hot key", format!("`SET NX` claims once; duplicates get `IdempotencyAlreadyInProgressError` (*code*); {}, and {} on the durable Redis", measured_hot(r, "py-powertools"), measured_hot(r, "py-powertools-durable")), format!("one `claimed` per key (*docs*); {ours_hot} (Python row)")),
            ("fencing: a stale holder cannot complete", "no: the completion is an unconditional `SET` (*code*); outside Lambda there is no in-progress expiry at all, so a crashed holder's key stays in progress until its record expires (1 hour by default)".into(), "yes: `idem_complete` with a stale fence raises *lease lost* (*docs*)".into()),
            ("lost-reply recovery", "yes for a success: a retry after the answer was lost gets the stored result (*code*, and the replay rows above)".into(), "yes: a replay returns the stored response; completing again with the same fence is a no-op (*docs*)".into()),
            ("failure caching", format!("no: a raised exception deletes the record (*code*, *docs*); {}", measured_failure(r, "py-powertools")), format!("by choice (`cache_failure`) (*docs*); {ours_fail}")),
        ]),
        ("`@node-idempotency/core` (Node.js), Redis adapter", "node-idempotency", [
            ("durability", "Redis's, as above (*code*: `SET NX PX`, `SET PX`); no PostgreSQL adapter exists".into(), "as above".into()),
            ("one execution on a hot key", format!("`SET NX` claims once; duplicates get `REQUEST_IN_PROGRESS` (*code*); {}, and {} on the durable Redis", measured_hot(r, "node-idempotency"), measured_hot(r, "node-idempotency-durable")), measured_hot(r, "node-ours")),
            ("fencing: a stale holder cannot complete", "no: `onResponse` is an unconditional `SET`; no lease: an in-progress record stays until its ttl (24 hours by default) (*code*)".into(), "yes (*docs*)".into()),
            ("lost-reply recovery", "yes: `onRequest` returns the stored response (*code*)".into(), "yes (*docs*)".into()),
            ("failure caching", format!("yes, of whatever the caller passes as `error` (*code*); {}", measured_failure(r, "node-idempotency")), measured_failure(r, "node-ours")),
        ]),
        ("express-idempotency (Node.js), as it ships", "node-express-idempotency", [
            ("durability", "none: records live in the process's memory (*docs*: \"not recommended for production\"); a MongoDB adapter is third-party".into(), "as above".into()),
            ("one execution on a hot key", format!("a find, then a create: two steps, atomic only because one Node.js process runs them one at a time in memory; a shared store through this interface would race (*code*); {}", measured_hot(r, "node-express-idempotency")), measured_hot(r, "node-ours-express")),
            ("fencing: a stale holder cannot complete", "no: no lease, no token; an in-progress record stays until the process ends (*code*)".into(), "yes (*docs*)".into()),
            ("lost-reply recovery", "yes within the process's life: the stored response is replayed; it is written after the answer is sent (fire and forget), so a retry that is fast enough can see the call still in progress (*code*)".into(), "yes (*docs*)".into()),
            ("failure caching", format!("no: a non-2xx answer is deleted (*code*, *docs*); {}", measured_failure(r, "node-express-idempotency")), measured_failure(r, "node-ours-express")),
        ]),
        ("the naive pattern (SELECT, then INSERT, then UPDATE)", "py-naive", [
            ("durability", "PostgreSQL's, as ours".into(), "same".into()),
            ("one execution on a hot key", format!("no: every duplicate that read nothing runs the body (*code*: bench/peers/, bench/src/workloads/calls.rs); {} (Python), {} (Node.js), {} (Rust)", measured_hot(r, "py-naive"), measured_hot(r, "node-naive"), measured_hot(r, "rust-naive")), measured_hot(r, "rust-pgstore")),
            ("fencing: a stale holder cannot complete", "no".into(), "yes (*docs*)".into()),
            ("lost-reply recovery", "yes for a completed call; a call in progress is run again".into(), "yes (*docs*)".into()),
            ("failure caching", "whatever its author writes; not measured".into(), measured_failure(r, "rust-pgstore")),
        ]),
    ];
    for (title, _, rows) in tables {
        let _ = writeln!(s, "**{title}**\n");
        let _ = writeln!(s, "| guarantee | the peer | pg_idempotency |");
        let _ = writeln!(s, "|---|---|---|");
        for (g, peer, ours) in rows {
            let _ = writeln!(s, "| {g} | {peer} | {ours} |");
        }
        let _ = writeln!(s);
    }
}
