//! F8, the server's clock jumps: the server under test runs with libfaketime preloaded
//! (a throwaway server, since its clock is the fault), and the test steps its wall clock
//! forward and back while calls are under way, as an NTP step or `date -s` would.
//!
//! - Forward, past a holder's lease: the lease lapses at once on the server's clock, so a
//!   second caller takes the call over (recovered, a higher fence, the same upstream key)
//!   while the first still works; the first holder's completion is refused (IK003) and the
//!   ledger refuses its effect made after the takeover's (or took it as the takeover's
//!   repeat): one effect for the call. A jump past a ttl forgets a result at once.
//! - At random points of a run of racing client tasks, forward and back, checked against
//!   I1-I4 and I6, with a record monitor and the purge alongside: nothing expires in these
//!   runs, so no record may vanish from the storage (read in poll order: I5 orders polls by
//!   the server's clock, which jumps back here).
//! - Back: leases and ttls last longer by the jump, nothing happens early. A second caller
//!   keeps getting `in_progress` after the lease's end by the real clock, until the
//!   server's own clock passes it; a record whose ttl ended by the real clock is neither
//!   expired nor purged (the extension's worker, the portable variant's
//!   `idem_purge_expired`) until the server's clock passes its `expires_at`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pg_idempotency_faults::check;
use pg_idempotency_faults::crash_server::{CrashServer, PURGE_WORKER};
use pg_idempotency_faults::fake_clock::{self, real_micros, server_offset_micros, FakeClock};
use pg_idempotency_faults::history::{Event, Observed, Op, Outcome, Run};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::{clock, ledger, run};
use pg_idempotency_tests::{self as suite, Backend, Skip};
use serde_json::json;
use tokio_postgres::Client;
use uuid::Uuid;

const NAME: &str = "pgidem_faults_f8";
/// Longer than any call takes: only a clock jump lapses it.
const LEASE: &str = "30 seconds";
/// A forward jump past the lease.
const PAST_THE_LEASE: i64 = 45;
/// Longer than every trial and every jump together: nothing expires during a run
/// (Run::ttl_micros stays None).
const TTL: &str = "1 hour";
const TTL_SECONDS: i64 = 3600;

/// A throwaway server started with its clock under the test's control, the ledger (on the
/// shared server), and a session on the server under test for reading its clock.
struct Bench {
    server: CrashServer,
    clock: FakeClock,
    ledger: String,
    admin: Client,
    test: &'static str,
}

impl Bench {
    /// None (the test skipped) when libfaketime is not installed. With `purger`, the
    /// extension's purge worker is made to read the fake clock too.
    async fn start(test: &'static str, purger: bool) -> Option<Bench> {
        let name = format!("{NAME}_{test}");
        let path = suite::root()
            .join("target/temp-clusters")
            .join(format!("{name}-{}.clock", std::process::id()));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Started an hour ahead when the purge worker's clock is to be told from the real one.
        let purger = purger && suite::backend() == Backend::Extension;
        let probe = if purger { 3600 } else { 0 };
        let Some(clock) = FakeClock::new(path, probe) else {
            suite::skip(Skip::Missing, fake_clock::MISSING);
            return None;
        };
        let env: Vec<(&'static str, String)> = clock.env();
        let (server, ledger) = tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let server = CrashServer::start_with_env(&name, &name, &env);
            let ledger = suite::fresh_database(&format!("{name}_ledger"));
            (server, ledger)
        })
        .await
        .unwrap();
        ledger::create(&ledger).await.unwrap();
        let admin = ledger::connect(&server.dsn()).await.unwrap();
        if purger {
            fake_clock::worker_follows(&admin, PURGE_WORKER, probe).await;
        }
        // The preload works: the server's clock follows the file, forward and back.
        let mut bench = Bench {
            server,
            clock,
            ledger,
            admin,
            test,
        };
        for offset in [600, -600, 0] {
            bench.jump_to(offset).await;
        }
        Some(bench)
    }

    /// Steps the server's clock to `offset` seconds from the real clock, and waits until
    /// the server reads it so.
    async fn jump_to(&mut self, offset: i64) {
        self.clock.set(offset);
        self.clock.seen_by(&self.admin).await;
    }

    async fn finish(self, tally: Option<&Tally>) {
        if let Some(tally) = tally {
            tally.close(&self.server.dsn(), "").await;
        }
        let ledger_db = format!("{NAME}_{}_ledger", self.test);
        drop(self.admin);
        tokio::task::spawn_blocking(move || {
            drop(self.server);
            suite::drop_database(&ledger_db);
        })
        .await
        .unwrap();
    }
}

/// One call at a time, in `scope`.
fn workload(scope: &str, seed: u64) -> run::Workload {
    run::Workload {
        processes: 1,
        keys: 1,
        calls_per_process: 1,
        scope: scope.into(),
        lease: LEASE.into(),
        ttl: TTL.into(),
        seed,
    }
}

/// Records the operations of the two sessions of a hand-made trial on the run's clock.
struct Recorder {
    clock: clock::Clock,
    events: Vec<Event>,
}

impl Recorder {
    fn record(&mut self, process: usize, key: &str, op: Op, invoked: i64, out: Outcome) -> Outcome {
        let returned = (!matches!(out, Outcome::Indeterminate { .. })).then(|| self.clock.now());
        self.events.push(Event {
            process,
            key: key.into(),
            op,
            invoked,
            returned,
            outcome: out.clone(),
        });
        out
    }

    async fn begin(&mut self, p: usize, c: &Client, w: &run::Workload, key: &str) -> Outcome {
        let t = self.clock.now();
        let out = run::begin(c, w, key).await;
        self.record(p, key, Op::Begin, t, out)
    }

    async fn effect(
        &mut self,
        p: usize,
        l: &Client,
        key: &str,
        fence: i64,
        u: uuid::Uuid,
    ) -> Outcome {
        let t = self.clock.now();
        let out = ledger::apply(l, key, fence, u).await;
        let op = Op::Effect {
            fence,
            upstream_key: u,
        };
        self.record(p, key, op, t, out)
    }

    async fn complete(
        &mut self,
        p: usize,
        c: &Client,
        w: &run::Workload,
        key: &str,
        fence: i64,
    ) -> Outcome {
        let response = json!({"by": p, "fence": fence});
        let t = self.clock.now();
        let out = run::complete(c, w, key, fence, &response).await;
        let op = Op::Complete { fence, response };
        self.record(p, key, op, t, out)
    }
}

fn ik003() -> Outcome {
    Outcome::Failed {
        sqlstate: "IK003".into(),
    }
}

fn succeeded() -> Outcome {
    Outcome::Completed {
        state: "succeeded".into(),
    }
}

// ---------------------------------------------------------------------------------------
// Forward.

const HOLDER: usize = 0;
const TAKER: usize = 1;

/// One trial: a holder claims, makes its effect before the jump (`effect_first`) or after
/// the takeover's, and completes last. Returns the run.
async fn forward_trial(b: &mut Bench, effect_first: bool, seed: u64) -> Run {
    let w = workload(&suite::scope("f8"), seed);
    let key = "k0";
    let named = format!("{} application_name={}", b.server.dsn(), run::APPLICATION);
    let holder = ledger::connect(&named).await.unwrap();
    let taker = ledger::connect(&named).await.unwrap();
    let l = ledger::connect(&b.ledger).await.unwrap();
    // The ledger is keyed by key alone: each trial starts from an empty one.
    l.batch_execute("TRUNCATE effects, fences").await.unwrap();
    let mut r = Recorder {
        clock: clock::Clock::start(),
        events: Vec::new(),
    };

    let Outcome::Claimed {
        fence: held,
        recovered: false,
        upstream_key,
        ..
    } = r.begin(HOLDER, &holder, &w, key).await
    else {
        panic!("the holder's begin is a fresh claim: {:?}", r.events)
    };
    if effect_first {
        assert_eq!(
            r.effect(HOLDER, &l, key, held, upstream_key).await,
            Outcome::Done
        );
    }
    // Before the jump the lease (30 s) holds: the call is in progress.
    assert_eq!(r.begin(TAKER, &taker, &w, key).await, Outcome::InProgress);

    let to = b.clock.offset() + PAST_THE_LEASE;
    b.jump_to(to).await;

    // At once, with no time passing: the lease lapsed on the server's clock.
    let Outcome::Claimed {
        fence,
        recovered,
        upstream_key: taken,
        attempt,
    } = r.begin(TAKER, &taker, &w, key).await
    else {
        panic!(
            "after a jump past the lease, a begin takes over: {:?}",
            r.events
        )
    };
    assert!(
        recovered,
        "the takeover says the earlier attempt is unknown"
    );
    assert!(
        fence > held,
        "takeover fence {fence} above the holder's {held}"
    );
    assert_eq!(attempt, 2);
    assert_eq!(taken, upstream_key, "the call keeps its upstream key");
    assert_eq!(r.effect(TAKER, &l, key, fence, taken).await, Outcome::Done);
    assert_eq!(r.complete(TAKER, &taker, &w, key, fence).await, succeeded());

    // The first holder carries on, unaware.
    if !effect_first {
        assert_eq!(
            r.effect(HOLDER, &l, key, held, upstream_key).await,
            Outcome::Failed {
                sqlstate: "ledger".into()
            },
            "the ledger refuses the superseded fence"
        );
    }
    assert_eq!(
        r.complete(HOLDER, &holder, &w, key, held).await,
        ik003(),
        "the stale holder's completion is refused"
    );
    assert_eq!(
        r.begin(HOLDER, &holder, &w, key).await,
        Outcome::Replay {
            succeeded: true,
            response: Some(json!({"by": TAKER, "fence": fence}))
        },
        "a later begin replays the takeover's result"
    );
    let rows = ledger::rows(&l, r.clock.start_epoch_micros).await.unwrap();
    assert_eq!(rows.len(), 1, "one effect for the call: {rows:?}");
    Run {
        records: run::final_records(&b.admin, &w.scope, r.clock)
            .await
            .unwrap(),
        events: r.events,
        ledger: rows,
        // Nothing expires during a trial (a one-hour ttl).
        ..Run::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_jump_hands_the_call_over_and_fences_off_the_holder() {
    let Some(mut b) = Bench::start("forward", false).await else {
        return;
    };
    let mut tally = Tally::new("F8 clock jumps");
    for n in 0..report::trials(2) {
        let effect_first = n % 2 == 0;
        let run = forward_trial(&mut b, effect_first, n as u64).await;
        let violations = check::check(&run);
        tally.add(&run, 1, &violations);
        assert!(
            violations.is_empty(),
            "trial {n} (holder's effect {}): {violations:#?}",
            if effect_first {
                "first"
            } else {
                "after the takeover's"
            }
        );
    }
    assert_eq!(tally.faults, tally.trials, "one jump per trial");
    results_expire_early(&mut b).await;
    b.finish(Some(&tally)).await;
}

/// A forward jump also shortens every ttl by the jump: a result remembered for a minute is
/// forgotten at once by a jump of a minute and a half (a repeat is a new call: a fresh
/// claim, a new upstream key), in much less than a minute of real time.
async fn results_expire_early(b: &mut Bench) {
    let scope = suite::scope("f8");
    let w = run::Workload {
        ttl: "1 minute".into(),
        ..workload(&scope, 0)
    };
    let c = ledger::connect(&b.server.dsn()).await.unwrap();
    let key = "remembered";
    let Outcome::Claimed {
        fence,
        upstream_key,
        ..
    } = run::begin(&c, &w, key).await
    else {
        panic!("a fresh key is claimed")
    };
    assert_eq!(
        run::complete(&c, &w, key, fence, &json!({})).await,
        succeeded()
    );
    let replay = Outcome::Replay {
        succeeded: true,
        response: Some(json!({})),
    };
    assert_eq!(run::begin(&c, &w, key).await, replay, "remembered");
    let to = b.clock.offset() + 90;
    let started = Instant::now();
    b.jump_to(to).await;
    match run::begin(&c, &w, key).await {
        Outcome::Claimed {
            attempt: 1,
            recovered: false,
            upstream_key: new,
            ..
        } => assert_ne!(new, upstream_key, "a new life"),
        other => panic!("after a jump past its ttl, the result is forgotten: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

// ---------------------------------------------------------------------------------------
// At random points of a run.

/// The offsets the clock is stepped to stay within this many seconds of the real clock
/// (well inside the ttl: nothing expires).
const FARTHEST: i64 = 900;

/// The next offset: forward past the lease (two times in three) or back by up to five
/// minutes, from `now`.
fn next_offset(choices: &mut run::Choices, now: i64) -> i64 {
    let forward = choices.below(3) < 2;
    let step = if forward {
        PAST_THE_LEASE + choices.below(60) as i64
    } else {
        -(60 + choices.below(240) as i64)
    };
    if (now + step).abs() > FARTHEST {
        now - step
    } else {
        now + step
    }
}

/// One run of racing tasks while the clock jumps at random points of it; the run and the
/// jumps made while it went on.
async fn random_trial(b: &mut Bench, seed: u64) -> (Run, usize) {
    let l = ledger::connect(&b.ledger).await.unwrap();
    l.batch_execute("TRUNCATE effects, fences").await.unwrap();
    let w = run::Workload {
        processes: 8,
        keys: 12,
        calls_per_process: 20,
        scope: suite::scope("f8"),
        lease: LEASE.into(),
        ttl: TTL.into(),
        seed,
    };
    let mut choices = run::Choices::new(seed.wrapping_mul(7919));
    // Early in the run, while calls are still being claimed (later, most are replays).
    let mut at: Vec<usize> = (0..4).map(|_| 1 + choices.below(60)).collect();
    at.sort();
    let progress = run::Progress::default();
    let (server, ledger_dsn, watched) = (b.server.dsn(), b.ledger.clone(), progress.clone());
    // A record monitor and the purge alongside (I5): nothing expires during a run, so
    // nothing may vanish from the storage while the clock jumps either way.
    let monitor = run::Monitor {
        poll_every: Duration::from_millis(20),
        purge_interval: Duration::from_secs(1),
        purge_by_call: suite::backend() == Backend::Portable,
        pause_between_calls: Duration::ZERO,
    };
    let running = tokio::spawn(async move {
        let options = run::Options::default().progress(watched).monitor(monitor);
        run::run(&server, &ledger_dsn, w, options).await
    });
    let mut jumps = 0;
    for events in at {
        if progress.reached(events).await.ended {
            break;
        }
        let to = next_offset(&mut choices, b.clock.offset());
        b.jump_to(to).await;
        jumps += 1;
    }
    let run = running.await.unwrap().unwrap();
    // Run::ttl_micros stays None, and rightly: the offsets stay within FARTHEST of the real
    // clock, so two moments of a run are at most 2 * FARTHEST further apart on the server's
    // clock than in real time, and a record lives at least TTL - 2 * FARTHEST (half an
    // hour) of real time, far longer than a run.
    const _: () = assert!(TTL_SECONDS - 2 * FARTHEST >= 1800);
    (run, jumps)
}

/// Records that vanished from the storage while the monitor watched, in poll order. In
/// these runs a record's row, once there, must stay with its life (its upstream key) to the
/// end: nothing expires during a run, no call is released, none fails, and a takeover keeps
/// the upstream key. A purge that used a jumped clock wrongly, or a begin that thought a
/// record expired, would show here.
fn vanished(observed: &Observed) -> Vec<String> {
    let mut found = Vec::new();
    let mut lives: HashMap<(&str, &str), (Uuid, i64)> = HashMap::new();
    for poll in &observed.polls {
        let now: HashMap<(&str, &str), Uuid> = poll
            .records
            .iter()
            .map(|r| ((r.key.as_str(), r.owner.as_str()), r.upstream_key))
            .collect();
        for (id, (life, seen_at)) in &lives {
            if now.get(id) != Some(life) {
                found.push(format!(
                    "record {id:?} (upstream {life}) seen at server time {seen_at}, then at {} \
                     {:?}",
                    poll.at,
                    now.get(id)
                ));
            }
        }
        for (id, life) in now {
            lives.entry(id).or_insert((life, poll.at));
        }
    }
    found
}

fn refused_completions(run: &Run) -> usize {
    run.events
        .iter()
        .filter(|e| matches!(e.op, Op::Complete { .. }) && e.outcome == ik003())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jumps_at_random_points_of_a_run() {
    let Some(mut b) = Bench::start("random", true).await else {
        return;
    };
    let mut tally = Tally::new("F8 clock jumps");
    let (mut refused, mut polls) = (0, 0);
    for n in 0..report::trials(6) {
        let (mut run, jumps) = random_trial(&mut b, 800 + n as u64).await;
        // I5 orders the monitor's polls by the server's clock, which jumps back here: read
        // in poll (real) order instead, where nothing may vanish (see `vanished`).
        let observed = run.observed.take().expect("the run had a monitor");
        let gone = vanished(&observed);
        assert!(gone.is_empty(), "trial {n}: {gone:#?}");
        // A poll before and after at least; a fast (release) trial may not last many more.
        assert!(
            observed.polls.len() >= 2,
            "trial {n}: the monitor hardly polled: {}",
            observed.polls.len()
        );
        polls += observed.polls.len();
        let violations = check::check(&run);
        tally.add(&run, jumps, &violations);
        refused += refused_completions(&run);
        assert!(violations.is_empty(), "trial {n}: {violations:#?}");
        // A clock jump loses no answer.
        assert_eq!(
            run.events.iter().filter(|e| e.is_indeterminate()).count(),
            0,
            "trial {n}"
        );
    }
    assert!(tally.faults > 0, "no jump was made: {tally:?}");
    // The jumps did what they are for: calls held by live holders were taken over.
    tally.assert_takeovers();
    eprintln!("{refused} stale completions refused, {polls} polls");
    b.finish(Some(&tally)).await;
}

// ---------------------------------------------------------------------------------------
// Back.

/// The server's clock and a begin, in one statement: (outcome, fence, lease_until,
/// server clock after the begin), times in microseconds since the epoch.
async fn begin_timed(
    c: &Client,
    scope: &str,
    key: &str,
    lease: &str,
    ttl: &str,
) -> (String, Option<i64>, i64, i64) {
    let row = c
        .query_one(
            "SELECT b.outcome, b.fence, \
                    (extract(epoch FROM b.lease_until) * 1000000)::bigint, \
                    (extract(epoch FROM clock_timestamp()) * 1000000)::bigint \
             FROM idem_begin($1, $2, lease => $3::text::interval, ttl => $4::text::interval) b",
            &[&scope, &key, &lease, &ttl],
        )
        .await
        .unwrap_or_else(|e| panic!("idem_begin: {e}"));
    (
        row.get(0),
        row.get(1),
        row.get::<_, Option<i64>>(2).unwrap_or(0),
        row.get(3),
    )
}

/// The server's clock, in microseconds since the epoch.
async fn server_now(c: &Client) -> i64 {
    c.query_one(
        "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// A begin whose lease lapses at `lapse` by the real clock, the clock then set back by
/// `back` seconds: a second caller keeps getting in_progress until the server's clock
/// passes the lease's end, about `back` seconds later in real time; then it takes over.
async fn no_early_takeover(b: &mut Bench, back: i64) {
    let scope = suite::scope("f8");
    let (lease, key) = ("1 second", "held");
    let holder = ledger::connect(&b.server.dsn()).await.unwrap();
    let other = ledger::connect(&b.server.dsn()).await.unwrap();
    b.jump_to(0).await;
    let offset = server_offset_micros(&b.admin).await;
    let (outcome, held, lease_until, _) = begin_timed(&holder, &scope, key, lease, TTL).await;
    assert_eq!(outcome, "claimed");
    // When the lease ends by the real clock.
    let real_lapse = lease_until - offset;

    b.jump_to(-back).await;
    let until = Instant::now() + Duration::from_secs(back as u64 + 20);
    let mut held_after_real_lapse = 0;
    let (taken_at_real, fence) = loop {
        let before = server_now(&other).await;
        let (outcome, fence, _, after) = begin_timed(&other, &scope, key, lease, TTL).await;
        let real = real_micros();
        match outcome.as_str() {
            "in_progress" => {
                assert!(
                    before < lease_until,
                    "the lease ended on the server's clock ({} µs ago) and the call is still \
                     in progress",
                    before - lease_until
                );
                // Half a second's margin for reading the offset.
                if real > real_lapse + 500_000 {
                    held_after_real_lapse += 1;
                }
            }
            "claimed" => {
                assert!(
                    after >= lease_until,
                    "taken over {} µs before the lease's end by the server's clock",
                    lease_until - after
                );
                break (real, fence.unwrap());
            }
            other => panic!("begin while the holder's lease lives answered {other}"),
        }
        assert!(Instant::now() < until, "the call was never taken over");
        // Polling the server: the lease lapses on its clock.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        held_after_real_lapse > 0,
        "no begin found the call held after its lease's end by the real clock"
    );
    let late = taken_at_real - real_lapse;
    assert!(
        late > (back - 1) * 1_000_000,
        "taken over {late} µs after the lease's end by the real clock, not about the {back} s \
         the clock was set back"
    );
    assert!(fence > held.unwrap());
    assert_eq!(
        run::complete(
            &holder,
            &workload(&scope, 0),
            key,
            held.unwrap(),
            &json!({})
        )
        .await,
        ik003(),
        "the first holder's completion, after the takeover"
    );
}

/// Which of `keys` of `scope` have a row in the storage (expired or not).
async fn stored(c: &Client, scope: &str) -> Vec<String> {
    c.query(
        "SELECT key FROM idempotency.records WHERE scope = $1 ORDER BY key",
        &[&scope],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// One purge pass: the portable variant's scheduler is the test; the extension's worker
/// purges on its own every second.
async fn purge(c: &Client) {
    if suite::backend() == Backend::Portable {
        c.execute("SELECT idem_purge_expired()", &[]).await.unwrap();
    }
}

/// A completed record with a ttl of `ttl`; its expires_at (microseconds since the epoch).
async fn completed(c: &Client, scope: &str, key: &str, ttl: &str) -> i64 {
    let (outcome, fence, _, _) = begin_timed(c, scope, key, "1 second", ttl).await;
    assert_eq!(outcome, "claimed", "{key}");
    let state: String = c
        .query_one(
            "SELECT state FROM idem_complete($1, $2, $3, '{}')",
            &[&scope, &key, &fence.unwrap()],
        )
        .await
        .unwrap_or_else(|e| panic!("idem_complete: {e}"))
        .get(0);
    assert_eq!(state, "succeeded", "{key}");
    c.query_one(
        "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint \
         FROM idempotency.records WHERE scope = $1 AND key = $2",
        &[&scope, &key],
    )
    .await
    .unwrap()
    .get(0)
}

/// A record whose ttl ends at `due` by the real clock, the clock then set back by `back`
/// seconds: it is not purged, nor expired on read, after `due`, while a record made after
/// `due` with a shorter ttl, due by the server's clock, is purged; once the server's clock
/// passes its expires_at, it is purged too.
async fn no_early_purge(b: &mut Bench, back: i64) {
    let scope = suite::scope("f8");
    let c = ledger::connect(&b.server.dsn()).await.unwrap();
    b.jump_to(0).await;
    let offset = server_offset_micros(&b.admin).await;
    let due = completed(&c, &scope, "kept", "2 seconds").await - offset;
    b.jump_to(-back).await;
    let w = workload(&scope, 0);
    let until = Instant::now() + Duration::from_secs(30);
    let kept = || vec!["kept".to_string()];

    // Past its end by the real clock: kept, and replayed.
    while real_micros() < due + 1_000_000 {
        purge(&c).await;
        assert_eq!(stored(&b.admin, &scope).await, kept(), "before its end");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A purge pass that runs after that, on the set-back clock: it purges a record due by
    // the server's clock, not the one due by the real clock.
    completed(&c, &scope, "purged", "1 second").await;
    loop {
        purge(&c).await;
        let left = stored(&b.admin, &scope).await;
        assert!(
            left.contains(&"kept".to_string()),
            "a record was purged {} µs after its end by the real clock, {} s before its end by \
             the server's clock",
            real_micros() - due,
            back
        );
        if left == kept() {
            break;
        }
        assert!(Instant::now() < until, "the purge never ran: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        run::begin(&c, &w, "kept").await,
        Outcome::Replay {
            succeeded: true,
            response: Some(json!({}))
        },
        "not expired on read either"
    );

    // The clock set right: the record is past its end, and purged.
    b.jump_to(0).await;
    while !stored(&b.admin, &scope).await.is_empty() {
        assert!(Instant::now() < until, "the record was never purged");
        purge(&c).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_jump_delays_takeovers_and_purges_and_nothing_comes_early() {
    let Some(mut b) = Bench::start("backward", true).await else {
        return;
    };
    // A jump back of a few seconds, waited out; then one of five minutes, set right again.
    no_early_takeover(&mut b, 4).await;
    no_early_purge(&mut b, 300).await;
    // Its figures are in its assertions, not in a history: no tally.
    b.finish(None).await;
}

// ---------------------------------------------------------------------------------------
// A wait.

/// A begin that waits for a live holder (`wait => '2 seconds'`) returns `in_progress`
/// after about two seconds of real time, even when the clock steps back during the wait.
/// (Until 0.3.0 the wait was timed by the wall clock in both backends, and a step back of
/// d stretched it by d: this test found it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_jump_does_not_stretch_a_wait() {
    let Some(mut b) = Bench::start("wait", false).await else {
        return;
    };
    let scope = suite::scope("f8");
    let holder = ledger::connect(&b.server.dsn()).await.unwrap();
    let (outcome, ..) = begin_timed(&holder, &scope, "held", "1 hour", TTL).await;
    assert_eq!(outcome, "claimed");
    const WAITER: &str = "pgidem_f8_waiter";
    let waiter = ledger::connect(&format!("{} application_name={WAITER}", b.server.dsn()))
        .await
        .unwrap();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let row = waiter
            .query_one(
                "SELECT outcome FROM idem_begin($1, 'held', wait => '2 seconds')",
                &[&scope],
            )
            .await
            .unwrap_or_else(|e| panic!("idem_begin with a wait: {e}"));
        row.get::<_, String>(0)
    });
    // The waiter is inside idem_begin, waiting: its statement is running.
    while b
        .admin
        .query_opt(
            "SELECT FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' \
             AND query LIKE '%idem_begin%'",
            &[&WAITER],
        )
        .await
        .unwrap()
        .is_none()
    {
        assert!(
            !waiting.is_finished(),
            "the begin returned before it was seen waiting"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.jump_to(-30).await;
    assert_eq!(waiting.await.unwrap(), "in_progress");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1900),
        "it waited: {waited:?}"
    );
    // The PL/pgSQL variant naps with pg_sleep, which PostgreSQL times by the wall clock: a
    // step back that lands inside one of its naps (up to 100 ms) stretches that nap by the
    // step, once; the time it slept ends the wait after that. The extension's wait is timed
    // by the monotonic clock and is never stretched.
    let bound = match suite::backend() {
        Backend::Extension => Duration::from_secs(10),
        Backend::Portable => Duration::from_secs(2 + 30 + 8),
    };
    assert!(
        waited < bound,
        "a wait of 2 s lasted {waited:?} with the clock set back 30 s during it"
    );
    b.finish(None).await;
}
