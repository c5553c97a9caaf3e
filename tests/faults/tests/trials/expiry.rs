//! I5, the expiry: records live one second (ttl), client tasks keep coming back to keys
//! after they expired (each pauses between its calls, over more keys than it calls per
//! second: a key sits idle for about a second at a time, sometimes several), and a purge
//! runs every second: the extension's purge worker (a throwaway server, where
//! `pg_idempotency.purge_interval = 1` and the worker purges the database under test), or,
//! for the portable variant, `idem_purge_expired()` called every second as pg_cron would.
//! A record monitor reads the storage table every 50 ms with the server's clock. Every
//! trial is checked (I1-I6): no record outlived its expiry by more than the purge interval
//! and the slack, none vanished before its expiry. The trials must show records purged
//! and records claimed afresh after they expired, and a control trial with the purge
//! stopped must break I5, so that a purge that silently did nothing fails the test.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_idempotency_faults::check::{self, Invariant, Violation};
use pg_idempotency_faults::crash_server::{self, CrashServer};
use pg_idempotency_faults::history::{Observed, Run, SeenRecord};
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Monitor};
use pg_idempotency_tests::{self as suite, Backend};

const DB: &str = "pgidem_faults_i5_expiry";
const TTL: &str = "1 second";
const TTL_MICROS: i64 = 1_000_000;
/// Shorter than the ttl (a lease may not outlast it): a call cut short would be taken over.
const LEASE: &str = "500 milliseconds";
const PURGE_INTERVAL: Duration = Duration::from_secs(1);

/// What the monitor saw happen to the records of one trial.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    polls: usize,
    /// Lives seen in one poll and without a row in the next: purged (the workload never
    /// releases a call).
    purged: usize,
    /// Lives replaced in place by a fresh claim (a new upstream key) after they expired.
    reclaimed: usize,
    /// Records seen after their `expires_at`, not purged yet.
    expired_still_stored: usize,
    /// The longest a record was seen stored after its `expires_at` (µs; I5 allows the purge
    /// interval and the slack).
    most_overdue: i64,
    /// The shortest time after its `expires_at` that a purged record was first seen gone
    /// (µs; I5 wants it at least 0).
    soonest_gone: Option<i64>,
}

fn seen(observed: &Observed) -> Seen {
    let mut s = Seen {
        polls: observed.polls.len(),
        ..Seen::default()
    };
    let mut before: HashMap<&str, &SeenRecord> = HashMap::new();
    for p in &observed.polls {
        let now: HashMap<&str, &SeenRecord> =
            p.records.iter().map(|r| (r.key.as_str(), r)).collect();
        for (key, was) in &before {
            match now.get(key) {
                None => {
                    s.purged += 1;
                    let after = p.at - was.expires_at;
                    s.soonest_gone = Some(s.soonest_gone.map_or(after, |m| m.min(after)));
                }
                Some(r) if r.upstream_key != was.upstream_key => s.reclaimed += 1,
                Some(_) => {}
            }
        }
        for r in p.records.iter().filter(|r| r.expires_at < p.at) {
            s.expired_still_stored += 1;
            s.most_overdue = s.most_overdue.max(p.at - r.expires_at);
        }
        before = now;
    }
    s
}

/// Stops or starts the extension's purge worker (purge_interval 0 turns it off); the
/// worker reads the setting again on the reload.
async fn purge_worker(server: &CrashServer, interval_secs: u64) {
    let c = crash_server::connect_when_up(&server.dsn()).await;
    // Two statements: ALTER SYSTEM cannot run inside the implicit transaction of a batch.
    let set = format!("ALTER SYSTEM SET pg_idempotency.purge_interval = {interval_secs}");
    for sql in [set.as_str(), "SELECT pg_reload_conf()"] {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
}

/// One trial on a fresh scope and a fresh ledger: the run with its monitor (and, when
/// `purging`, the purge), checked with the records' ttl.
async fn trial(
    server: &CrashServer,
    n: u64,
    calls: usize,
    purging: bool,
) -> (Run, Seen, Vec<Violation>) {
    let ledger_db = format!("{DB}_ledger");
    let ledger_dsn = tokio::task::spawn_blocking(move || suite::fresh_database(&ledger_db))
        .await
        .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: 4,
        keys: 40,
        calls_per_process: calls,
        scope: suite::scope("expiry"),
        lease: LEASE.into(),
        ttl: TTL.into(),
        seed: 500 + n,
    };
    let monitor = Monitor {
        poll_every: Duration::from_millis(50),
        purge_interval: PURGE_INTERVAL,
        purge_by_call: purging && suite::backend() == Backend::Portable,
        pause_between_calls: Duration::from_millis(100),
    };
    let mut run = run::run(
        &server.dsn(),
        &ledger_dsn,
        w,
        run::Options::default().monitor(monitor),
    )
    .await
    .unwrap_or_else(|e| panic!("trial {n}: {e}"));
    run.ttl_micros = Some(TTL_MICROS);
    let seen = seen(run.observed.as_ref().expect("the run had a monitor"));
    let violations = check::check(&run);
    (run, seen, violations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_are_purged_after_their_expiry_and_never_before() {
    let started = Instant::now();
    let server = tokio::task::spawn_blocking(|| CrashServer::start("i5_expiry", DB))
        .await
        .unwrap();
    let server = Arc::new(server);

    // The control: with the purge stopped, expired records stay and I5 must say so.
    if suite::backend() == Backend::Extension {
        purge_worker(&server, 0).await;
    }
    let (_, control, violations) = trial(&server, 0, 40, false).await;
    eprintln!("control (no purge): {control:?}, {:?}", started.elapsed());
    assert!(
        violations.iter().any(|v| v.invariant == Invariant::I5),
        "no purge ran, yet I5 found no record that outlived its expiry: {control:?}"
    );
    if suite::backend() == Backend::Extension {
        purge_worker(&server, PURGE_INTERVAL.as_secs()).await;
    }

    let mut tally = Tally::new("expiry");
    let mut total = Seen::default();
    for n in 1..=report::trials(2) as u64 {
        let t = Instant::now();
        let (run, seen, violations) = trial(&server, n, 80, true).await;
        tally.add(&run, 0, &violations);
        total.polls += seen.polls;
        total.purged += seen.purged;
        total.reclaimed += seen.reclaimed;
        total.expired_still_stored += seen.expired_still_stored;
        total.most_overdue = total.most_overdue.max(seen.most_overdue);
        total.soonest_gone = match (total.soonest_gone, seen.soonest_gone) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        eprintln!(
            "trial {n}: {} operations, {seen:?}, {:?}",
            run.events.len(),
            t.elapsed()
        );
        assert!(violations.is_empty(), "trial {n}: {violations:#?}");
    }
    // The monitor watched the whole run, and the run did what it is for: records were
    // purged while it went on, and keys were claimed afresh once their record expired.
    assert!(
        total.polls > 20 * tally.trials,
        "the monitor hardly polled: {total:?}"
    );
    assert!(total.purged > 0, "no record was purged: {total:?}");
    assert!(
        total.reclaimed > 0,
        "no expired record was claimed afresh: {total:?}"
    );

    tally
        .close(
            &server.dsn(),
            &format!("{total:?}; {:?}", started.elapsed()),
        )
        .await;
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&format!("{DB}_ledger"));
        drop(server);
    })
    .await
    .unwrap();
}
