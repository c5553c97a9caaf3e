//! F9, failover to a streaming replica: while client tasks race on a few keys through plain
//! SQL (lease 300 ms), the primary is stopped with `pg_ctl stop -m immediate` and its
//! standby (made with `pg_basebackup -R`) is promoted; the tasks, whose connection string
//! names both servers with `target_session_attrs=read-write` (what a libpq user writes),
//! see their connections break, reach the promoted standby and go on. The final records are
//! read back from it.
//!
//! Four modes of replication (replica.rs), a tally each:
//! - **synchronous** (`synchronous_standby_names` names the standby, `synchronous_commit =
//!   on`) and **remote_apply**: a commit is acknowledged once the standby has it, so nothing
//!   acknowledged may be lost and no fence handed out again: I1-I4 and the superseded-fence
//!   check hold with 0 violations, and so do the direct checks of after_failover.rs (every
//!   acknowledged claim and completion is in the promoted server's records; every fence
//!   handed out after the failover is above every fence acknowledged before it);
//! - **asynchronous**: the primary acknowledges what the standby may not have yet, so a
//!   failover may lose acknowledgements. That is the documented warning, not a product
//!   failure: the losses found are counted into the "F9 async" tally and do not fail the
//!   test. But the test proves they are found: every other asynchronous trial cuts the
//!   replication link (the standby's `primary_conninfo` emptied) and lets the primary
//!   acknowledge a stretch of operations alone before it stops, and then the losses must be
//!   reported, both by the checker and by the direct checks;
//! - **synchronous, sessions local**: synchronous as above, but the client sessions connect
//!   with `options='-c synchronous_commit=local'` (checked with `SHOW` through their
//!   connection string). The product raises `local` to `on` for its claims and completions,
//!   so they must still wait for the standby. Every trial cuts the link: the primary's
//!   commits then wait (the test sees sessions in `wait_event = 'SyncRep'` before the stop,
//!   once the run has made no progress for `STALL`), the run makes none, and nothing
//!   acknowledged is lost (0 violations, checker and direct checks). Were `local` kept, the
//!   primary would answer `ALONE` operations alone and lose them, as the async cut does.
//!
//! With the extension, the library is preloaded on both servers (the standby is a copy of
//! the primary's data folder) and the purge worker must run on the promoted standby.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_idempotency_faults::after_failover;
use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::crash_server;
use pg_idempotency_faults::history::Run;
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::replica::{Failover, ReplicatedServer, Replication};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Progress};
use pg_idempotency_tests as suite;

const NAME: &str = "pgidem_faults_f9_failover";
const LEASE: &str = "300 milliseconds";
const PROCESSES: usize = 4;
const CALLS: usize = 400;
const KEYS: usize = 256;
/// Operations before the failover: at least this many, plus a random part of as many again.
const BEFORE: usize = 150;
/// With the replication link cut, operations the primary answers alone before it stops.
const ALONE: usize = 50;
/// With the link cut in a mode that waits for the standby, how long the run must make no
/// progress (its sessions waiting) before the primary stops.
const STALL: Duration = Duration::from_secs(2);

/// What one trial found.
struct Trial {
    run: Run,
    failover: Failover,
    /// The checker's violations (check.rs).
    checker: Vec<Violation>,
    /// Acknowledgements the promoted server does not hold, and fences handed out again.
    direct: Vec<Violation>,
    /// Claims made on the promoted server, whose fences the direct check compares.
    claims_after: usize,
    /// See [`Injected::waiting_for_standby`].
    waiting_for_standby: Option<i64>,
}

/// What the failover injector did.
struct Injected {
    failover: Failover,
    /// With the link cut in a mode that waits for the standby: client sessions the primary
    /// showed waiting for the standby (`SyncRep`) just before it stopped.
    waiting_for_standby: Option<i64>,
}

/// Fails the primary over to its standby once the run has made `at` operations; when
/// `cut`, the replication link is cut first and the primary answers `ALONE` more operations
/// alone, or, when `may_stall` (the mode waits for the standby), until the run has made no
/// progress for `STALL`: the sessions wait for a standby that no longer listens, and the
/// sessions waiting are counted. None when the run ended first; panics when it ended during
/// the failover (the tasks must go on against the promoted server: the run is too short).
async fn failover_at(
    server: Arc<ReplicatedServer>,
    progress: Progress,
    at: usize,
    cut: bool,
    may_stall: bool,
) -> Option<Injected> {
    if progress.reached(at).await.ended {
        return None;
    }
    let mut waiting_for_standby = None;
    if cut {
        let s = server.clone();
        tokio::task::spawn_blocking(move || s.cut_replication())
            .await
            .unwrap();
        let target = progress.now().events + ALONE;
        if may_stall {
            // Polls the run's pace: ALONE more operations, or none for STALL.
            let mut last = progress.now();
            let mut since = Instant::now();
            loop {
                let now = progress.now();
                if now.ended {
                    return None;
                }
                if now.events >= target || since.elapsed() >= STALL {
                    break;
                }
                if now != last {
                    (last, since) = (now, Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let s = server.clone();
            let waiting = tokio::task::spawn_blocking(move || s.sessions_waiting_for_standby())
                .await
                .unwrap();
            waiting_for_standby = Some(waiting);
        } else if progress.reached(target).await.ended {
            return None;
        }
    }
    let failover = tokio::task::spawn_blocking(move || server.fail_over())
        .await
        .unwrap();
    assert!(
        !progress.now().ended,
        "the client tasks ended during the failover: make the run longer"
    );
    Some(Injected {
        failover,
        waiting_for_standby,
    })
}

async fn trial(server: Arc<ReplicatedServer>, mode: Replication, cut: bool, n: u64) -> Trial {
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.prepare(mode))
        .await
        .unwrap();
    let ledger_dsn =
        tokio::task::spawn_blocking(|| suite::fresh_database(&format!("{NAME}_ledger")))
            .await
            .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: PROCESSES,
        keys: KEYS,
        calls_per_process: CALLS,
        scope: suite::scope("f9"),
        lease: LEASE.into(),
        ttl: "1 hour".into(),
        seed: 900 + n,
    };
    let dsn = server.session_dsn(mode);
    // The sessions have the mode's synchronous_commit (the product keeps on and
    // remote_apply, and raises local to on for its own commits).
    let c = crash_server::connect_when_up(&dsn).await;
    let commit: String = c
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(commit, mode.session_commit(), "{mode:?}");
    drop(c);

    let progress = Progress::default();
    let at = BEFORE + Choices::new(9000 + n).below(BEFORE);
    let may_stall = mode == Replication::SyncSessionsLocal;
    let injector = tokio::spawn(failover_at(
        server.clone(),
        progress.clone(),
        at,
        cut,
        may_stall,
    ));
    let started = Instant::now();
    let run = run::run(
        &dsn,
        &ledger_dsn,
        w,
        run::Options::default().progress(progress),
    )
    .await
    .unwrap_or_else(|e| panic!("trial {n} ({mode:?}): {e}"));
    let Injected {
        failover,
        waiting_for_standby,
    } = injector
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("trial {n} ({mode:?}): the run ended before the failover"));
    let checker = check::check(&run);
    let mut direct = after_failover::lost_acknowledgements(&run);
    direct.extend(after_failover::fences_reissued(&run, started, &failover));
    let claims_after = after_failover::claims_after_failover(&run, started, &failover);
    Trial {
        run,
        failover,
        checker,
        direct,
        claims_after,
        waiting_for_standby,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_loses_nothing_acknowledged_when_replication_is_synchronous() {
    let server = tokio::task::spawn_blocking(|| ReplicatedServer::start("f9", NAME))
        .await
        .unwrap();
    let server = Arc::new(server);
    let modes = [
        Replication::Asynchronous,
        Replication::Synchronous,
        Replication::RemoteApply,
        Replication::SyncSessionsLocal,
    ];
    let mut tallies: Vec<Tally> = modes
        .iter()
        .map(|m| Tally::new(&format!("F9 {}", m.name())))
        .collect();
    // Asynchronous trials with the link cut, and what they found.
    let (mut cut_trials, mut cut_checker, mut cut_direct) = (0, 0, 0);
    // Claims on the promoted server in the synchronous modes (their fences were compared).
    let mut synchronous_claims_after = 0;
    let mut trial_no = 0u64;
    // One trial per mode in the test command (the failovers and re-seeds take most of its
    // time); a full run makes as many rounds as its scale.
    for round in 0..report::trials(1) {
        for (m, &mode) in modes.iter().enumerate() {
            let cut = match mode {
                Replication::Asynchronous => round % 2 == 0,
                Replication::SyncSessionsLocal => true,
                _ => false,
            };
            let t0 = Instant::now();
            let t = trial(server.clone(), mode, cut, trial_no).await;
            trial_no += 1;
            let mut all = t.checker.clone();
            all.extend(t.direct.iter().cloned());
            tallies[m].add(&t.run, 1, &all);
            eprintln!(
                "trial {trial_no} ({mode:?}{}): {} operations, {} unknown, promoted {:?} \
                 after the stop, {} claims after it, {} checker and {} direct findings, \
                 {:?} sessions waiting for the standby, {:?}",
                if cut { ", link cut" } else { "" },
                t.run.events.len(),
                t.run.events.iter().filter(|e| e.is_indeterminate()).count(),
                t.failover.promoted - t.failover.stopped,
                t.claims_after,
                t.checker.len(),
                t.direct.len(),
                t.waiting_for_standby,
                t0.elapsed()
            );
            // The promoted standby is a primary that runs the product whole.
            let s = server.clone();
            tokio::task::spawn_blocking(move || {
                assert!(s.primary_is_writable(), "the promoted server is read-only");
                s.purge_worker_runs();
            })
            .await
            .unwrap();
            match mode {
                Replication::Asynchronous => {
                    // Documented losses: counted, shown, not a failure.
                    for v in &all {
                        eprintln!("  async loss: {v}");
                    }
                    if cut {
                        cut_trials += 1;
                        cut_checker += t.checker.len();
                        cut_direct += t.direct.len();
                        assert!(
                            !t.direct.is_empty(),
                            "trial {trial_no}: the primary answered {ALONE} operations with \
                             the link cut, and no acknowledgement was found lost"
                        );
                    }
                }
                _ => {
                    if mode == Replication::SyncSessionsLocal {
                        // The sessions' `local` was raised for the product's commits: with
                        // the link cut they wait for the standby (a regression would
                        // commit locally, go on, and lose those acknowledgements in the
                        // failover, which the assertion below reports too).
                        let waiting = t.waiting_for_standby.unwrap_or(0);
                        assert!(
                            waiting > 0,
                            "trial {trial_no} ({mode:?}): with the link cut, no session \
                             waited for the standby (SyncRep): the product's commits did \
                             not wait for it"
                        );
                        // The stop broke the calls that waited: their outcome is unknown.
                        let unknown = t.run.events.iter().filter(|e| e.is_indeterminate());
                        assert!(
                            unknown.count() > 0,
                            "trial {trial_no} ({mode:?}): {waiting} sessions waited when \
                             the primary stopped, and no outcome was unknown"
                        );
                    }
                    synchronous_claims_after += t.claims_after;
                    assert!(
                        all.is_empty(),
                        "trial {trial_no} ({mode:?}): acknowledged calls lost or fences \
                         repeated after the failover: {all:#?}"
                    )
                }
            }
        }
    }
    // The stop breaks the operations in flight; a trial may stop between calls, so this is
    // asserted over all modes together (and per trial above where sessions were seen
    // waiting when the primary stopped).
    let unknown: usize = tallies.iter().map(|t| t.indeterminate).sum();
    assert!(
        unknown > 0,
        "no outcome was unknown in any mode: {tallies:?}"
    );
    eprintln!("async with the link cut: {cut_trials} trials, {cut_checker} checker findings, {cut_direct} direct");
    assert!(cut_trials > 0, "no asynchronous trial cut the link");
    assert!(
        synchronous_claims_after > 0,
        "no claim on a promoted server in the synchronous modes: no fence was compared"
    );
    assert!(
        cut_checker > 0,
        "the checker did not see the acknowledgements lost with the link cut"
    );
    for t in &tallies {
        t.close(&server.dsn(), "").await;
    }
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&format!("{NAME}_ledger"));
        drop(server);
    })
    .await
    .unwrap();
}
