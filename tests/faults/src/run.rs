//! Client tasks calling the SQL API the way a service does (claim, effect, complete), each
//! operation recorded with its invocation and return times.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::clock::Clock;
use crate::history::{Event, FinalRecord, Observed, Op, Outcome, Run};
use crate::ledger;

/// What the client tasks do.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Concurrent client tasks, each on its own connection.
    pub processes: usize,
    /// Keys the tasks pick from (few keys: many duplicates racing on each).
    pub keys: usize,
    /// Calls each task makes.
    pub calls_per_process: usize,
    pub scope: String,
    pub lease: String,
    pub ttl: String,
    /// Seed of the tasks' choices, so a failing run can be repeated.
    pub seed: u64,
}

/// What the client tasks do after an operation whose answer was lost, beyond connecting
/// again. Apart from the [`Workload`] so that adding a behaviour never changes how a
/// workload is written; the default is none of them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Retries {
    /// After a completion whose answer was lost, complete again with the same fence and
    /// response, up to this many times while the answer keeps being lost: what a real
    /// client does, since completing again with the fence that completed the record returns
    /// the stored state (and a fence that lost its lease is refused).
    pub lost_completion: usize,
    /// After a begin whose answer was lost, begin again with the same claim token (each
    /// call makes one), up to this many times while the answer keeps being lost: a claim
    /// the server made is given back at once, with its fence (0.3.0).
    pub lost_claim: usize,
}

/// How far the client tasks have got: what a fault injector paces itself on, rather than
/// on time (see [`Progress`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pace {
    /// Operations recorded so far, by all tasks.
    pub events: usize,
    /// Every task has made all its calls.
    pub ended: bool,
}

/// The run's [`Pace`] as it goes, shared with whoever watches it (clones watch the same run).
#[derive(Debug, Clone)]
pub struct Progress(Arc<watch::Sender<Pace>>);

impl Default for Progress {
    fn default() -> Progress {
        Progress(Arc::new(watch::channel(Pace::default()).0))
    }
}

impl Progress {
    pub fn now(&self) -> Pace {
        *self.0.borrow()
    }

    /// Waits until at least `events` operations have been recorded, or every task has
    /// ended; the pace then.
    pub async fn reached(&self, events: usize) -> Pace {
        let mut watching = self.0.subscribe();
        let pace = watching
            .wait_for(|p| p.events >= events || p.ended)
            .await
            .map(|p| *p);
        pace.unwrap_or_else(|_| unreachable!("the sender lives in self"))
    }

    fn recorded(&self) {
        self.0.send_modify(|p| p.events += 1);
    }

    fn ended(&self) {
        self.0.send_modify(|p| p.ended = true);
    }
}

/// A small deterministic generator (xorshift64*): the choices of a run follow its seed.
pub struct Choices(u64);

impl Choices {
    /// A generator for `seed` (0 is not a state of xorshift: it becomes 1).
    pub fn new(seed: u64) -> Choices {
        Choices(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A claim token, from the seed like every other choice.
    pub fn token(&mut self) -> uuid::Uuid {
        uuid::Uuid::from_u64_pair(self.next(), self.next())
    }
}

/// The outcome of a failed statement: a definite failure when the server answered with a
/// SQLSTATE, unknown otherwise (the connection broke: it may have taken effect). An error
/// of severity PANIC is unknown too: the server crashed right then, and what the session
/// wrote may be durable already (a commit flushes all WAL inserted so far: a backend whose
/// commit record lies in a segment it has just written and synced PANICs when the next
/// segment, holding other sessions' WAL, cannot be created, as on F10's full WAL volume),
/// so its SQLSTATE (53100 there) does not mean nothing changed.
pub fn failure(e: &tokio_postgres::Error) -> Outcome {
    if e.as_db_error().is_some_and(|d| d.severity() == "PANIC") {
        return Outcome::Indeterminate { why: e.to_string() };
    }
    match e.code() {
        Some(code) => Outcome::Failed {
            sqlstate: code.code().to_string(),
        },
        None => Outcome::Indeterminate { why: e.to_string() },
    }
}

/// The application_name of the client tasks' sessions on the server under test.
pub const APPLICATION: &str = "pgidem_faults";

const BEGIN: &str = "SELECT outcome, fence, attempt, recovered, upstream_key, succeeded, response \
     FROM idem_begin($1, $2, lease => $3::text::interval, ttl => $4::text::interval, \
                     claim_token => $5)";
const COMPLETE: &str = "SELECT state FROM idem_complete($1, $2, $3, $4)";

/// `idem_begin` of `key` with the workload's scope, lease and ttl, as an outcome.
pub async fn begin(c: &Client, w: &Workload, key: &str) -> Outcome {
    begin_with_token(c, w, key, None).await
}

/// The same, with this attempt's claim token.
pub async fn begin_with_token(
    c: &Client,
    w: &Workload,
    key: &str,
    token: Option<uuid::Uuid>,
) -> Outcome {
    match c
        .query_one(BEGIN, &[&w.scope, &key, &w.lease, &w.ttl, &token])
        .await
    {
        Ok(row) => match row.get::<_, String>(0).as_str() {
            "claimed" => Outcome::Claimed {
                fence: row.get(1),
                attempt: row.get(2),
                recovered: row.get(3),
                upstream_key: row.get(4),
            },
            "replay" => Outcome::Replay {
                succeeded: row.get(5),
                response: row.get(6),
            },
            _ => Outcome::InProgress,
        },
        Err(e) => failure(&e),
    }
}

/// `idem_complete` of `key` with `fence` and `response` (a success), as an outcome.
pub async fn complete(
    c: &Client,
    w: &Workload,
    key: &str,
    fence: i64,
    response: &Value,
) -> Outcome {
    match c
        .query_one(COMPLETE, &[&w.scope, &key, &fence, response])
        .await
    {
        Ok(row) => Outcome::Completed { state: row.get(0) },
        Err(e) => failure(&e),
    }
}

/// A connection that comes back after a fault: dropped when an operation's outcome was
/// unknown (the connection may be dead), made again before the next operation.
pub struct Conn {
    dsn: String,
    client: Option<Client>,
}

impl Conn {
    pub fn new(dsn: &str) -> Conn {
        Conn {
            dsn: dsn.to_string(),
            client: None,
        }
    }

    /// The connection, made again if needed: retried until the server accepts it (it may be
    /// restarting), for at most a minute.
    pub async fn get(&mut self) -> &Client {
        if self.client.as_ref().is_some_and(|c| c.is_closed()) {
            self.client = None;
        }
        if self.client.is_none() {
            let until = Instant::now() + std::time::Duration::from_secs(60);
            loop {
                match ledger::connect(&self.dsn).await {
                    Ok(c) => {
                        self.client = Some(c);
                        break;
                    }
                    Err(e) if Instant::now() > until => {
                        panic!("cannot connect to {} for a minute: {e}", self.dsn)
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
                }
            }
        }
        self.client
            .as_ref()
            .unwrap_or_else(|| unreachable!("connected above"))
    }

    /// After an operation whose outcome is unknown: the next one connects again.
    pub fn settle(&mut self, outcome: &Outcome) {
        if matches!(outcome, Outcome::Indeterminate { .. }) {
            self.client = None;
        }
    }
}

/// `call`, given up after `limit` when there is one: a call not answered in time has an
/// unknown outcome (what a service's own timeout makes of it, e.g. the Rust client's
/// dispatcher with `Idempotent::timeout`).
async fn bounded(limit: Option<Duration>, call: impl Future<Output = Outcome>) -> Outcome {
    match limit {
        None => call.await,
        Some(limit) => {
            tokio::time::timeout(limit, call)
                .await
                .unwrap_or_else(|_| Outcome::Indeterminate {
                    why: format!("no answer within {limit:?}"),
                })
        }
    }
}

/// One client task: `calls_per_process` calls of randomly chosen keys, each a begin and,
/// when it claims, the effect and the completion; calls to the server under test are
/// given up after `call_timeout`, if any.
#[allow(clippy::too_many_arguments)]
async fn process(
    id: usize,
    mut server: Conn,
    mut ledger: Conn,
    w: Arc<Workload>,
    retries: Retries,
    call_timeout: Option<Duration>,
    pause: Duration,
    clock: Clock,
    progress: Progress,
) -> Vec<Event> {
    let mut choices = Choices(w.seed.wrapping_add(id as u64 + 1).max(1));
    let mut events = Vec::new();
    let mut record = |key: &str, op: Op, invoked: i64, outcome: Outcome| {
        let returned = (!matches!(outcome, Outcome::Indeterminate { .. })).then(|| clock.now());
        events.push(Event {
            process: id,
            key: key.to_string(),
            op,
            invoked,
            returned,
            outcome: outcome.clone(),
        });
        progress.recorded();
        outcome
    };
    for call in 0..w.calls_per_process {
        if call > 0 && !pause.is_zero() {
            // A rate, not an ordering: keys sit idle long enough for their records to expire.
            tokio::time::sleep(pause).await;
        }
        let key = format!("k{}", choices.below(w.keys));
        let token = (retries.lost_claim > 0).then(|| choices.token());
        let c = server.get().await;
        let t = clock.now();
        let answer = bounded(call_timeout, begin_with_token(c, &w, &key, token)).await;
        server.settle(&answer);
        let mut answer = record(&key, Op::Begin, t, answer);
        for _ in 0..retries.lost_claim {
            if !matches!(answer, Outcome::Indeterminate { .. }) {
                break;
            }
            let c = server.get().await;
            let t = clock.now();
            let again = bounded(call_timeout, begin_with_token(c, &w, &key, token)).await;
            server.settle(&again);
            answer = record(&key, Op::BeginRepeat, t, again);
        }
        let Outcome::Claimed {
            fence,
            upstream_key,
            ..
        } = answer
        else {
            continue;
        };
        let l = ledger.get().await;
        let t = clock.now();
        let applied = ledger::apply(l, &key, fence, upstream_key).await;
        ledger.settle(&applied);
        let op = Op::Effect {
            fence,
            upstream_key,
        };
        if record(&key, op, t, applied) != Outcome::Done {
            continue;
        }
        let response = json!({"by": id, "fence": fence});
        let c = server.get().await;
        let t = clock.now();
        let done = bounded(call_timeout, complete(c, &w, &key, fence, &response)).await;
        server.settle(&done);
        let op = Op::Complete {
            fence,
            response: response.clone(),
        };
        let mut lost = matches!(record(&key, op, t, done), Outcome::Indeterminate { .. });
        for _ in 0..retries.lost_completion {
            if !lost {
                break;
            }
            let c = server.get().await;
            let t = clock.now();
            let again = bounded(call_timeout, complete(c, &w, &key, fence, &response)).await;
            server.settle(&again);
            let op = Op::Complete {
                fence,
                response: response.clone(),
            };
            lost = matches!(record(&key, op, t, again), Outcome::Indeterminate { .. });
        }
    }
    events
}

/// The records of the run's scope as stored at its end.
pub async fn final_records(
    c: &Client,
    scope: &str,
    clock: Clock,
) -> Result<Vec<FinalRecord>, tokio_postgres::Error> {
    Ok(c.query(
        "SELECT key, state, fence, response, \
                    (extract(epoch FROM expires_at) * 1000000)::bigint - $2 \
             FROM idempotency.records WHERE scope = $1 ORDER BY key",
        &[&scope, &clock.start_epoch_micros],
    )
    .await?
    .iter()
    .map(|r| FinalRecord {
        key: r.get(0),
        state: r.get(1),
        fence: r.get(2),
        response: r.get(3),
        expires_at: r.get(4),
    })
    .collect())
}

/// A record monitor alongside the client tasks (see `monitor.rs`), and the purge it needs:
/// what the checker's I5 (no record outlives its expiry by more than the purge interval,
/// none is purged early) reads. Off unless a test asks for it with [`Options::monitor`]
/// (not on whenever [`Run::ttl_micros`] is set): the monitor only means something while a
/// purge really runs, and the extension's worker purges only the database that
/// `pg_idempotency.database` names, so the test must run on a server set up for it (a
/// throwaway one); and it adds a session polling the server under test.
#[derive(Debug, Clone, Copy)]
pub struct Monitor {
    /// How often the monitor reads the storage table.
    pub poll_every: Duration,
    /// The purge interval in force: the extension's `pg_idempotency.purge_interval` on the
    /// server, or how often the run calls `idem_purge_expired` itself.
    pub purge_interval: Duration,
    /// The run calls `idem_purge_expired()` every `purge_interval`, as a pg_cron job does
    /// for the portable variant; false where the extension's purge worker purges.
    pub purge_by_call: bool,
    /// Each client task pauses this long between its calls (zero: none), so that keys sit
    /// idle and their records expire, some reclaimed and some purged.
    pub pause_between_calls: Duration,
}

impl Monitor {
    /// A monitor for a run whose records never expire within it (a ttl of an hour): it
    /// checks only that no record seen committed disappears, whatever the fault does to
    /// the server. No purge is called; nothing pauses.
    pub fn watching_for_vanished_records() -> Monitor {
        Monitor {
            poll_every: Duration::from_millis(50),
            purge_interval: Duration::from_secs(1),
            purge_by_call: false,
            pause_between_calls: Duration::ZERO,
        }
    }
}

/// How a [`run`] goes beyond its workload: what the client tasks retry, who watches its
/// progress, a bound on each call, a record monitor. The default is none of them (client
/// tasks that connect again after a fault and do nothing else); a test names what differs:
/// `Options::default().retries(..).progress(..)`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub retries: Retries,
    /// Reported to as the run goes: what a fault injector paces itself on.
    pub progress: Progress,
    /// Every call to the server under test given up after this long (when set): its
    /// outcome is then unknown and the task connects again, as a service with a
    /// client-side timeout does when a connection stops answering.
    pub call_timeout: Option<Duration>,
    /// A record monitor (and a purge, if it says so) alongside the tasks: the run's
    /// [`Run::observed`] holds what it saw.
    pub monitor: Option<Monitor>,
}

impl Options {
    pub fn retries(self, retries: Retries) -> Options {
        Options { retries, ..self }
    }

    pub fn progress(self, progress: Progress) -> Options {
        Options { progress, ..self }
    }

    pub fn call_timeout(self, limit: Duration) -> Options {
        Options {
            call_timeout: Some(limit),
            ..self
        }
    }

    pub fn monitor(self, monitor: Monitor) -> Options {
        Options {
            monitor: Some(monitor),
            ..self
        }
    }
}

/// Runs the workload against the SQL API at `server_dsn`, effects into the ledger at
/// `ledger_dsn` (created by [`ledger::create`]), as `options` say; returns everything the
/// checker needs.
pub async fn run(
    server_dsn: &str,
    ledger_dsn: &str,
    w: Workload,
    options: Options,
) -> Result<Run, tokio_postgres::Error> {
    let Options {
        retries,
        progress,
        call_timeout,
        monitor,
    } = options;
    let w = Arc::new(w);
    let clock = Clock::start();
    let (stop, stopped) = watch::channel(false);
    let watching = monitor.map(|m| {
        let polls = tokio::spawn(crate::monitor::watch_records(
            server_dsn.to_string(),
            w.scope.clone(),
            clock,
            m.poll_every,
            stopped.clone(),
        ));
        let purge = m.purge_by_call.then(|| {
            tokio::spawn(crate::monitor::purge_on_schedule(
                server_dsn.to_string(),
                m.purge_interval,
                stopped.clone(),
            ))
        });
        (m, polls, purge)
    });
    let pause = monitor.map(|m| m.pause_between_calls).unwrap_or_default();
    let mut tasks = Vec::new();
    // The client tasks' sessions are named, so a fault can pick them (pg_terminate_backend);
    // the session that reads the records at the end is not one of them.
    let named_dsn = format!("{server_dsn} application_name={APPLICATION}");
    for id in 0..w.processes {
        tasks.push(tokio::spawn(process(
            id,
            Conn::new(&named_dsn),
            Conn::new(ledger_dsn),
            w.clone(),
            retries,
            call_timeout,
            pause,
            clock,
            progress.clone(),
        )));
    }
    let mut run = Run::default();
    for t in tasks {
        run.events
            .extend(t.await.unwrap_or_else(|e| panic!("client task: {e}")));
    }
    progress.ended();
    let _ = stop.send(true);
    if let Some((m, polls, purge)) = watching {
        run.observed = Some(Observed {
            purge_interval_micros: m.purge_interval.as_micros() as i64,
            polls: polls
                .await
                .unwrap_or_else(|e| panic!("record monitor: {e}")),
        });
        if let Some(p) = purge {
            p.await.unwrap_or_else(|e| panic!("purge: {e}"));
        }
    }
    let admin = ledger::connect(server_dsn).await?;
    run.records = final_records(&admin, &w.scope, clock).await?;
    run.ledger = ledger::rows(
        &ledger::connect(ledger_dsn).await?,
        clock.start_epoch_micros,
    )
    .await?;
    Ok(run)
}
