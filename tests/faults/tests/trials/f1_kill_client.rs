//! F1, clients killed: several client processes call a few hot keys (claim, effect in the
//! ledger, complete) and the test kills them with SIGKILL at points it picks from the lines
//! they print: right after a claim was answered, while the effect is in flight, while a
//! begin or a completion is in flight. A replacement process then goes on with the calls
//! the killed one had left, under the same process id, as a restarted service would. The
//! operation a killed process had invoked and not seen answered is indeterminate; the
//! call it held stays in progress until its lease (300 ms) lapses and another client takes
//! it over. Every run is checked against I1-I4 and I6. Trials alternate between clients
//! that call plain SQL and clients that call through the Rust client (PgStore).

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

use pg_idempotency_faults::client_process::{ClientProcess, ClientSettings, Message};
use pg_idempotency_faults::history::{Op, Outcome, Run};
use pg_idempotency_faults::lines::{Line, Recorder};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices};
use pg_idempotency_faults::{check, clock, ledger};
use pg_idempotency_tests as suite;

const CLIENT: &str = env!("CARGO_BIN_EXE_fault_client");
const NAME: &str = "pgidem_faults_f1_kill";
const PROCESSES: usize = 4;
const KEYS: usize = 3;
const CALLS: usize = 20;
/// Short, so that calls left in progress are taken over during the run.
const LEASE: &str = "300 milliseconds";
/// Between a client's calls: a run spans a few leases.
const PACE_MICROS: u64 = 40_000;
/// Processes one id may go through (the last one is never killed, so the run ends).
const GENERATIONS: usize = 3;

fn ledger_db() -> String {
    format!("{NAME}_ledger")
}

fn databases() -> (String, String) {
    let server = suite::fresh_database(NAME);
    suite::install(&server);
    let ledger = suite::fresh_database(&ledger_db());
    (server, ledger)
}

/// Where a process is killed: at the `nth` line of this kind it prints.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// `returned ... claimed`: between the claim and the effect.
    AfterClaim,
    /// `invoked ... effect`: the effect in flight.
    InEffect,
    /// `invoked ... begin`: a begin in flight.
    InBegin,
    /// `invoked ... complete`: a completion in flight.
    InComplete,
}

impl Point {
    fn matches(self, line: &Line) -> bool {
        match (self, line) {
            (Point::AfterClaim, Line::Returned { outcome, .. }) => {
                matches!(outcome, Outcome::Claimed { .. })
            }
            (Point::InEffect, Line::Invoked { op, .. }) => matches!(op, Op::Effect { .. }),
            (Point::InBegin, Line::Invoked { op, .. }) => matches!(op, Op::Begin),
            (Point::InComplete, Line::Invoked { op, .. }) => matches!(op, Op::Complete { .. }),
            _ => false,
        }
    }
}

/// A process id's state: its current process, its kill plan, its history so far.
struct Slot {
    process: Option<ClientProcess>,
    generation: usize,
    /// The plan for the current process: kill at the `nth` line matching the point.
    plan: Option<(Point, usize)>,
    seen: usize,
    killed: bool,
    /// Calls begun by this id's processes so far (a replacement makes the rest).
    calls_begun: usize,
    recorder: Recorder,
}

struct Trial<'a> {
    server: &'a str,
    ledger: &'a str,
    scope: String,
    start_epoch_micros: i64,
    seed: u64,
    /// `sql` or `rust`: what the clients call the API through.
    api: &'static str,
    choices: Choices,
    lines: Sender<Message>,
}

impl Trial<'_> {
    /// A plan for a new process: most are killed, at a random point and occurrence.
    fn plan(&mut self, generation: usize) -> Option<(Point, usize)> {
        if generation + 1 >= GENERATIONS || self.choices.below(4) == 0 {
            return None;
        }
        let point = [
            Point::AfterClaim,
            Point::InEffect,
            Point::InBegin,
            Point::InComplete,
        ][self.choices.below(4)];
        Some((point, 1 + self.choices.below(3)))
    }

    fn start(&mut self, id: usize, generation: usize, calls: usize) -> ClientProcess {
        let settings = ClientSettings {
            server: self.server.into(),
            ledger: self.ledger.into(),
            scope: self.scope.clone(),
            keys: KEYS,
            lease: LEASE.into(),
            ttl: "1 hour".into(),
            calls,
            // A replacement chooses its keys afresh.
            seed: self.seed * 1000 + generation as u64,
            process: id,
            start_epoch_micros: self.start_epoch_micros,
            pause_after: None,
            pace_micros: PACE_MICROS,
            api: self.api.into(),
        };
        ClientProcess::spawn(Path::new(CLIENT), &settings, generation, self.lines.clone())
    }
}

fn next_message(rx: &Receiver<Message>) -> Message {
    tokio::task::block_in_place(|| rx.recv_timeout(Duration::from_secs(60)))
        .unwrap_or_else(|e| panic!("no line from any client for a minute: {e}"))
}

/// Waits until no session of the clients is left on either database: a killed client's
/// statement may still be running on the server and commit after the kill.
async fn sessions_gone(server: &str) {
    let c = ledger::connect(server).await.unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = $1 AND datname IN ($2, $3)",
                &[&run::APPLICATION, &NAME, &ledger_db()],
            )
            .await
            .unwrap()
            .get(0);
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < until,
            "{left} client sessions still open after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One trial: the run and how many processes were killed.
async fn trial(server: &str, ledger_dsn: &str, seed: u64, api: &'static str) -> (Run, usize) {
    let l = ledger::connect(ledger_dsn).await.unwrap();
    // The ledger is keyed by key alone: each trial starts from an empty one.
    l.batch_execute("TRUNCATE effects, fences").await.unwrap();
    let clock = clock::Clock::start();
    let (tx, rx) = mpsc::channel();
    let mut t = Trial {
        server,
        ledger: ledger_dsn,
        scope: suite::scope("f1"),
        start_epoch_micros: clock.start_epoch_micros,
        seed,
        api,
        choices: Choices::new(seed + 1),
        lines: tx,
    };
    let mut slots: HashMap<usize, Slot> = HashMap::new();
    for id in 0..PROCESSES {
        let plan = t.plan(0);
        slots.insert(
            id,
            Slot {
                process: Some(t.start(id, 0, CALLS)),
                generation: 0,
                plan,
                seen: 0,
                killed: false,
                calls_begun: 0,
                recorder: Recorder::new(id),
            },
        );
    }
    let mut kills = 0;
    while slots.values().any(|s| s.process.is_some()) {
        let m = next_message(&rx);
        let slot = slots.get_mut(&m.process).expect("a known process id");
        assert_eq!(m.generation, slot.generation, "lines come in process order");
        let Some(text) = m.line else {
            // Ended: exited after its calls, or killed (then a replacement goes on).
            let mut process = slot.process.take().expect("a running process");
            if slot.killed {
                slot.recorder.died("process killed (SIGKILL)");
            } else {
                assert!(process.wait(), "client {} exited with an error", m.process);
                slot.recorder.died("process exited");
            }
            let left = CALLS - slot.calls_begun;
            if slot.killed && left > 0 {
                slot.generation += 1;
                slot.plan = t.plan(slot.generation);
                slot.seen = 0;
                slot.killed = false;
                slot.process = Some(t.start(m.process, slot.generation, left));
            }
            continue;
        };
        let Some(line) = slot.recorder.line(&text) else {
            continue;
        };
        if matches!(line, Line::Invoked { op: Op::Begin, .. }) {
            slot.calls_begun += 1;
        }
        if let Some((point, nth)) = slot.plan {
            if !slot.killed && point.matches(&line) {
                slot.seen += 1;
                if slot.seen == nth {
                    slot.process.as_mut().expect("running").kill();
                    slot.killed = true;
                    kills += 1;
                }
            }
        }
    }
    sessions_gone(server).await;

    let mut run = Run::default();
    for (_, slot) in slots {
        run.events.extend(slot.recorder.events);
    }
    let c = ledger::connect(server).await.unwrap();
    run.records = run::final_records(&c, &t.scope, clock).await.unwrap();
    run.ledger = ledger::rows(&l, clock.start_epoch_micros).await.unwrap();
    (run, kills)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_clients_break_no_invariant() {
    let (server, ledger_dsn) = tokio::task::spawn_blocking(databases).await.unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let mut tally = Tally::new("F1 client killed");
    let mut in_flight: HashMap<&str, usize> = HashMap::new();
    for n in 0..report::trials(6) {
        // Plain SQL and the Rust client (PgStore), in turn.
        let api = if n % 2 == 0 { "sql" } else { "rust" };
        let (run, kills) = trial(&server, &ledger_dsn, n as u64, api).await;
        let violations = check::check(&run);
        tally.add(&run, kills, &violations);
        for e in run.events.iter().filter(|e| e.is_indeterminate()) {
            let op = match e.op {
                Op::Begin => "begin",
                Op::Effect { .. } => "effect",
                Op::Complete { .. } => "complete",
                _ => "other",
            };
            *in_flight.entry(op).or_default() += 1;
        }
        assert!(violations.is_empty(), "trial {n} ({api}): {violations:#?}");
    }
    // The kills happened, some while an operation was in flight, and the calls they left
    // in progress were taken over.
    assert!(tally.faults > 0, "no client was killed: {tally:?}");
    assert!(
        tally.indeterminate > 0,
        "no kill caught an operation in flight: {tally:?}"
    );
    tally.assert_takeovers();
    tally
        .close(&server, &format!("in flight when killed: {in_flight:?}"))
        .await;
    tokio::task::spawn_blocking(|| {
        suite::drop_database(NAME);
        suite::drop_database(&ledger_db());
    })
    .await
    .unwrap();
}
