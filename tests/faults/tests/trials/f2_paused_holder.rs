//! F2, a paused holder: a client process claims a key and is frozen (SIGSTOP, as a long GC
//! pause or a suspended VM would freeze it) right after its claim or right after its
//! effect. Its lease (300 ms) lapses; the test takes the call over (polling `idem_begin`
//! until it answers `claimed` with `recovered`), makes the effect under the same upstream
//! key and completes it. Then the frozen process is continued and carries on as if nothing
//! had happened: its effect is refused by the ledger (stale fence) or was already made
//! under the upstream key the takeover repeated, and its completion, which it is told to
//! send whatever the ledger said, is refused by the server with IK003 (lease lost). One
//! effect in all, and the takeover's result is what a later begin replays. Trials run
//! through plain SQL and through the Rust client (PgStore: its LeaseLost is IK003).

use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use pg_idempotency_faults::client_process::{ClientProcess, ClientSettings, Message};
use pg_idempotency_faults::history::{Event, Op, Outcome, Run};
use pg_idempotency_faults::lines::{self, Line, Recorder};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::{check, clock, ledger, run, rust_client};
use pg_idempotency_tests as suite;
use serde_json::json;

const CLIENT: &str = env!("CARGO_BIN_EXE_fault_client");
const NAME: &str = "pgidem_faults_f2_paused";
const LEASE: &str = "300 milliseconds";
/// The frozen process is process 0; the test, taking over, is process 1.
const HOLDER: usize = 0;
const TAKER: usize = 1;

fn databases() -> (String, String) {
    let server = suite::fresh_database(NAME);
    suite::install(&server);
    let ledger = suite::fresh_database(&format!("{NAME}_ledger"));
    (server, ledger)
}

/// The next line of the holder (None: it ended), waiting in a way that leaves the
/// runtime's other threads free.
fn next_line(rx: &Receiver<Message>) -> Option<String> {
    tokio::task::block_in_place(|| rx.recv_timeout(Duration::from_secs(60)))
        .unwrap_or_else(|e| panic!("no line from the client for a minute: {e}"))
        .line
}

/// Records one operation the test itself makes, on the run's shared clock.
struct Taker<'a> {
    start_epoch_micros: i64,
    events: &'a mut Vec<Event>,
}

impl Taker<'_> {
    fn record(&mut self, key: &str, op: Op, invoked: i64, outcome: Outcome) -> Outcome {
        let returned = (!matches!(outcome, Outcome::Indeterminate { .. }))
            .then(|| lines::since(self.start_epoch_micros));
        self.events.push(Event {
            process: TAKER,
            key: key.to_string(),
            op,
            invoked,
            returned,
            outcome: outcome.clone(),
        });
        outcome
    }

    fn now(&self) -> i64 {
        lines::since(self.start_epoch_micros)
    }
}

/// One trial: the holder frozen after `point` (`claim` or `effect`); the run, and how many
/// holders were seen frozen (1).
async fn trial(server: &str, ledger_dsn: &str, point: &str, api: &str, seed: u64) -> (Run, usize) {
    let clock = clock::Clock::start();
    let w = run::Workload {
        processes: 1,
        keys: 1,
        calls_per_process: 1,
        scope: suite::scope("f2"),
        lease: LEASE.into(),
        ttl: "1 hour".into(),
        seed,
    };
    let key = "k0";
    let l = ledger::connect(ledger_dsn).await.unwrap();
    // The ledger is keyed by key alone: each trial starts from an empty one.
    l.batch_execute("TRUNCATE effects, fences").await.unwrap();

    let (tx, rx) = mpsc::channel();
    let settings = ClientSettings {
        server: server.into(),
        ledger: ledger_dsn.into(),
        scope: w.scope.clone(),
        keys: 1,
        lease: w.lease.clone(),
        ttl: w.ttl.clone(),
        calls: 1,
        seed,
        process: HOLDER,
        start_epoch_micros: clock.start_epoch_micros,
        pause_after: Some(point.into()),
        pace_micros: 0,
        api: api.into(),
    };
    let mut holder = ClientProcess::spawn(Path::new(CLIENT), &settings, 0, tx);
    let mut recorder = Recorder::new(HOLDER);
    loop {
        let line = next_line(&rx).unwrap_or_else(|| panic!("the holder ended before pausing"));
        if let Some(Line::Paused { .. }) = recorder.line(&line) {
            break;
        }
    }
    let Some(Outcome::Claimed {
        fence: held,
        recovered: false,
        upstream_key,
        ..
    }) = recorder.events.first().map(|e| e.outcome.clone())
    else {
        panic!(
            "the holder's first answer is a fresh claim: {:?}",
            recorder.events
        )
    };

    // Frozen: told to go on, it cannot until it is continued.
    holder.signal("STOP");
    let frozen = Instant::now() + Duration::from_secs(10);
    while !holder.is_stopped() {
        assert!(Instant::now() < frozen, "the holder never stopped");
        std::thread::yield_now();
    }
    let fired = 1;
    holder.tell("go complete");

    // The takeover: begin until the lapsed lease is taken over.
    let c = ledger::connect(&format!("{server} application_name={}", run::APPLICATION))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut taker = Taker {
        start_epoch_micros: clock.start_epoch_micros,
        events: &mut events,
    };
    let until = Instant::now() + Duration::from_secs(30);
    let (fence, recovered, taken_key) = loop {
        let t = taker.now();
        let answer = begin(&c, &w, key, api).await;
        match taker.record(key, Op::Begin, t, answer) {
            Outcome::Claimed {
                fence,
                recovered,
                upstream_key,
                ..
            } => break (fence, recovered, upstream_key),
            Outcome::InProgress if Instant::now() < until => {
                // Polling the server: the lease lapses on its clock, not ours.
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => panic!("begin while the holder is frozen answered {other:?}"),
        }
    };
    assert!(
        recovered,
        "the takeover says the earlier attempt is unknown"
    );
    assert!(
        fence > held,
        "takeover fence {fence} above the holder's {held}"
    );
    assert_eq!(taken_key, upstream_key, "the call keeps its upstream key");
    let t = taker.now();
    let applied = ledger::apply(&l, key, fence, upstream_key).await;
    let op = Op::Effect {
        fence,
        upstream_key,
    };
    assert_eq!(taker.record(key, op, t, applied), Outcome::Done);
    let response = json!({"by": TAKER, "fence": fence});
    let t = taker.now();
    let done = if api == "rust" {
        rust_client::complete(&c, &w, key, fence, &response).await
    } else {
        run::complete(&c, &w, key, fence, &response).await
    };
    let op = Op::Complete {
        fence,
        response: response.clone(),
    };
    assert_eq!(
        taker.record(key, op, t, done),
        Outcome::Completed {
            state: "succeeded".into()
        }
    );

    // Continued: the holder carries on with its stale fence.
    holder.signal("CONT");
    while let Some(line) = next_line(&rx) {
        recorder.line(&line);
    }
    assert!(holder.wait(), "the holder exited with an error");
    recorder.died("the holder exited");
    let holder_events = recorder.events;
    let outcome_of = |op: &str| -> Vec<Outcome> {
        holder_events
            .iter()
            .filter(|e| {
                matches!(
                    (&e.op, op),
                    (Op::Effect { .. }, "effect") | (Op::Complete { .. }, "complete")
                )
            })
            .map(|e| e.outcome.clone())
            .collect()
    };
    let refused = Outcome::Failed {
        sqlstate: "IK003".into(),
    };
    assert_eq!(
        outcome_of("complete"),
        [refused],
        "the holder's completion is refused: {holder_events:?}"
    );
    let effect = if point == "claim" {
        // It woke up before its effect: the ledger has seen the higher fence.
        Outcome::Failed {
            sqlstate: "ledger".into(),
        }
    } else {
        Outcome::Done
    };
    assert_eq!(
        outcome_of("effect"),
        [effect],
        "the holder's effect: {holder_events:?}"
    );

    // A later begin replays the takeover's result.
    let t = taker.now();
    let answer = begin(&c, &w, key, api).await;
    assert_eq!(
        taker.record(key, Op::Begin, t, answer),
        Outcome::Replay {
            succeeded: true,
            response: Some(response)
        }
    );

    let ledger_rows = ledger::rows(&l, clock.start_epoch_micros).await.unwrap();
    assert_eq!(
        ledger_rows.len(),
        1,
        "one effect for the call: {ledger_rows:?}"
    );
    events.extend(holder_events);
    let run = Run {
        events,
        ledger: ledger_rows,
        records: run::final_records(&c, &w.scope, clock).await.unwrap(),
        ttl_micros: None,
        observed: None,
    };
    (run, fired)
}

/// A begin through plain SQL or the Rust client.
async fn begin(c: &tokio_postgres::Client, w: &run::Workload, key: &str, api: &str) -> Outcome {
    if api == "rust" {
        rust_client::begin(c, w, key).await
    } else {
        run::begin(c, w, key).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_is_fenced_off() {
    let (server, ledger_dsn) = tokio::task::spawn_blocking(databases).await.unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let mut tally = Tally::new("F2 paused holder");
    for n in 0..report::trials(4) {
        // Frozen before its effect, then after it, in turn; through plain SQL, then
        // through the Rust client (PgStore), both for the holder and for the takeover.
        let point = if n % 2 == 0 { "claim" } else { "effect" };
        let api = if n / 2 % 2 == 0 { "sql" } else { "rust" };
        let (run, fired) = trial(&server, &ledger_dsn, point, api, n as u64).await;
        let violations = check::check(&run);
        tally.add(&run, fired, &violations);
        assert!(
            violations.is_empty(),
            "trial {n} (frozen after {point}, {api}): {violations:#?}"
        );
    }
    // Every trial saw its holder frozen (the stop was observed, not assumed).
    assert_eq!(tally.faults, tally.trials);
    tally.close(&server, "").await;
    tokio::task::spawn_blocking(|| {
        suite::drop_database(NAME);
        suite::drop_database(&format!("{NAME}_ledger"));
    })
    .await
    .unwrap();
}
