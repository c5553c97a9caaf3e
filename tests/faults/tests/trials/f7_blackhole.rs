//! F7, half-open connections: a connection that stops answering in the middle of a call
//! without closing, as when a client host, a pooler or a middlebox hangs. The proxy
//! (`Fault::HalfOpen`) makes one connection silent both ways, never delivers what it held
//! and passes no close on: either at the call's request (the server never sees it) or after
//! the server committed it (the client never learns it did). The client gives up after its
//! own bound (a timeout around each call, what `Idempotent::timeout` does in the Rust client's
//! dispatcher), records the outcome as unknown, connects again and goes on.
//!
//! The server under test is configured as docs/reliability.md advises ([`ADVICE`], per
//! database: what an operator sets in postgresql.conf for these settings), and reached over
//! TCP so that the keepalive settings apply. Two tests:
//!
//! - `half_open_calls_keep_the_invariants`: client tasks race on few keys while calls are
//!   cut at random (mostly completions, sometimes claims; before or after the commit); every
//!   trial is checked against the invariants, and after it every session left half-open is
//!   idle, outside any transaction, holding no lock: our calls are single autocommit
//!   statements, so a claim holds the record by its lease, not by a row lock.
//! - `what_ends_a_half_open_session`: each bound measured on its own: a claim cut after its
//!   commit is taken over once its lease lapses and its idle session ends by
//!   `idle_session_timeout`; a claim inside an explicit transaction holds its row lock until
//!   `idle_in_transaction_session_timeout` ends the session (a duplicate waits that long);
//!   a duplicate waiting on that lock whose client went away (socket closed) ends within
//!   `client_connection_check_interval`, and without that setting goes on waiting; a
//!   duplicate waiting behind a silent half-open connection is ended by neither that nor
//!   the keepalives (the peer's kernel still answers), only by `statement_timeout`.

use std::future::Future;
use std::time::{Duration, Instant};

use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::history::{Outcome, Run};
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::proxy::{Cut, Fault, Proxy, Trigger, Upstream};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Progress};
use pg_idempotency_tests as suite;
use tokio_postgres::{Client, NoTls};

const NAME: &str = "pgidem_faults_f7";

/// The server settings docs/reliability.md advises against vanished and half-open clients,
/// with the small values the test measures them with (the docs give production values).
const ADVICE: &[(&str, &str)] = &[
    ("tcp_keepalives_idle", "1"),
    ("tcp_keepalives_interval", "1"),
    ("tcp_keepalives_count", "2"),
    ("tcp_user_timeout", "3000"),
    ("client_connection_check_interval", "500ms"),
    ("idle_in_transaction_session_timeout", "2s"),
];
/// Measured in `what_ends_a_half_open_session` only (in the run, lingering half-open
/// sessions are kept to be inspected).
const IDLE_SESSION_TIMEOUT: Duration = Duration::from_secs(2);
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(2);
const CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// The keepalives' own bound on a peer that stopped answering: idle + interval x count.
const KEEPALIVE_BOUND: Duration = Duration::from_secs(3);

/// The client's bound on one call.
const CALL_TIMEOUT: Duration = Duration::from_millis(500);
/// What a loaded two-core machine may add to a server-side timeout before it is seen.
const SLACK: Duration = Duration::from_millis(1500);

/// Creates database `db` with the backend under test and the advised settings; its DSN.
fn server_database(db: &str, idle_session_timeout: bool) -> String {
    let dsn = suite::fresh_database(db);
    suite::install(&dsn);
    let mut settings: Vec<(&str, String)> =
        ADVICE.iter().map(|(k, v)| (*k, v.to_string())).collect();
    if idle_session_timeout {
        settings.push((
            "idle_session_timeout",
            format!("{}ms", IDLE_SESSION_TIMEOUT.as_millis()),
        ));
    }
    let mut c = suite::connect_to(&dsn);
    for (name, value) in settings {
        c.batch_execute(&format!("ALTER DATABASE {db} SET {name} = '{value}'"))
            .unwrap_or_else(|e| panic!("ALTER DATABASE {db} SET {name}: {e}"));
    }
    dsn
}

/// The proxy in front of the server of `dsn`, reached over TCP on 127.0.0.1 (the test
/// clusters listen there) so that the server's keepalive settings apply to its sessions.
async fn tcp_proxy(dsn: &str) -> Proxy {
    let port = dsn
        .split_whitespace()
        .find_map(|p| p.strip_prefix("port="))
        .unwrap_or("5432");
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    Proxy::start(Upstream::Tcp(addr)).await.unwrap()
}

async fn connect(dsn: &str) -> Client {
    ledger::connect(dsn)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {dsn}: {e}"))
}

/// Polls `check` until it holds or `limit` passes: how long it took.
async fn within<F: Future<Output = bool>>(
    limit: Duration,
    check: impl FnMut() -> F,
) -> Option<Duration> {
    let started = Instant::now();
    suite::eventually_async(limit, check)
        .await
        .then(|| started.elapsed())
}

// ---------------------------------------------------------------------------------------
// The run: random half-open calls under load, checked against the invariants.

/// At most this many operations between two cuts.
const STRIDE: usize = 60;

/// Cuts one call at a time until the run ends: a random number of operations after the
/// last cut, the next completion (three times in four) or claim to be sent is cut, before
/// it reaches the server or after it committed.
async fn cutter(proxy: &Proxy, progress: Progress, seed: u64) {
    let mut choices = Choices::new(seed);
    loop {
        let next = progress.now().events + 1 + choices.below(STRIDE);
        if progress.reached(next).await.ended {
            return;
        }
        let call = if choices.below(4) == 0 {
            "idem_begin"
        } else {
            "idem_complete"
        };
        let cut = if choices.below(2) == 0 {
            Cut::Request
        } else {
            Cut::AfterCommit
        };
        let before = proxy.fired();
        proxy.set_once(Fault::HalfOpen(Trigger::QueryContains(call.into()), cut));
        // The next cut once this one fired (or the run is over).
        while proxy.fired() == before && !progress.now().ended {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.set(Fault::None);
    }
}

/// The client tasks' sessions left on the server (those cut are still there: nothing told
/// the server), with their state and how many locks each holds.
async fn lingering(c: &Client, db: &str) -> Vec<(i32, String, i64)> {
    c.query(
        "SELECT a.pid, coalesce(a.state, ''), \
                (SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid) \
         FROM pg_stat_activity a WHERE a.datname = $1 AND a.application_name = $2",
        &[&db, &run::APPLICATION],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

struct Trial {
    run: Run,
    cuts: usize,
    violations: Vec<Violation>,
    /// Half-open sessions the server still had when the run ended.
    lingering: usize,
}

async fn trial(n: u64) -> Trial {
    let db = format!("{NAME}_run");
    let db2 = db.clone();
    let (server, ledger_dsn) = tokio::task::spawn_blocking(move || {
        let server = server_database(&db2, false);
        let ledger = suite::fresh_database(&format!("{db2}_ledger"));
        (server, ledger)
    })
    .await
    .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let proxy = tcp_proxy(&server).await;
    let w = run::Workload {
        processes: 6,
        // Enough keys that claims and completions go on all run long (a completed key is
        // only replayed), few enough that duplicates race and cut claims are taken over.
        keys: 256,
        calls_per_process: 120,
        scope: suite::scope("f7"),
        lease: "300 milliseconds".into(),
        ttl: "1 hour".into(),
        seed: 700 + n,
    };
    let progress = Progress::default();
    let through = proxy.dsn(&server);
    let run = {
        let cutting = cutter(&proxy, progress.clone(), 7000 + n);
        let running = run::run(
            &through,
            &ledger_dsn,
            w,
            run::Options::default()
                .progress(progress)
                .call_timeout(CALL_TIMEOUT),
        );
        let (run, ()) = tokio::join!(running, cutting);
        run.unwrap_or_else(|e| panic!("trial {n}: {e}"))
    };
    let cuts = proxy.fired() as usize;
    // The healthy sessions close as their tasks end; every cut one stays (nothing told the
    // server), idle: the claim or completion it carried was one autocommit statement, so
    // nothing of it holds a lock or a transaction.
    let direct = connect(&server).await;
    let settled = |left: &[(i32, String, i64)]| {
        left.len() == cuts
            && left
                .iter()
                .all(|(_, state, locks)| state == "idle" && *locks == 0)
    };
    let _ = within(Duration::from_secs(5), || async {
        settled(&lingering(&direct, &db).await)
    })
    .await;
    let left = lingering(&direct, &db).await;
    assert!(
        settled(&left),
        "trial {n}: {cuts} connections cut; the sessions left (pid, state, locks): {left:?}"
    );
    // Dropping the proxy closes its sockets: the server sees the close and ends them.
    drop(proxy);
    let gone = within(Duration::from_secs(10), || async {
        lingering(&direct, &db).await.is_empty()
    })
    .await;
    assert!(gone.is_some(), "trial {n}: sessions outlived the proxy");
    Trial {
        violations: check::check(&run),
        run,
        cuts,
        lingering: left.len(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_open_calls_keep_the_invariants() {
    let mut tally = Tally::new("F7 half-open connections");
    let mut lingering = 0;
    let mut timed_out = 0;
    for n in 0..report::trials(3) {
        let started = Instant::now();
        let t = trial(n as u64).await;
        tally.add(&t.run, t.cuts, &t.violations);
        let gave_up = t
            .run
            .events
            .iter()
            .filter(|e| matches!(&e.outcome, Outcome::Indeterminate { why } if why.starts_with("no answer within")))
            .count();
        timed_out += gave_up;
        let taken = report::takeovers(&t.run);
        lingering += t.lingering;
        eprintln!(
            "trial {n}: {} operations, {} cut, {gave_up} given up by the client's timeout, \
             {taken} taken over, {} half-open sessions left on the server; {:?}",
            t.run.events.len(),
            t.cuts,
            t.lingering,
            started.elapsed()
        );
        assert!(t.violations.is_empty(), "trial {n}: {:#?}", t.violations);
    }
    assert!(tally.faults > 0, "no connection was cut: {tally:?}");
    assert!(
        timed_out > 0,
        "no call was given up by its timeout: {tally:?}"
    );
    tally.assert_unknown_outcomes();
    // Claims cut after their commit were taken over once their lease lapsed.
    tally.assert_takeovers();
    // The server did not notice the half-open connections by itself.
    assert!(lingering > 0, "no half-open session was left on the server");
    tally
        .close(
            &suite::dsn(),
            &format!("{timed_out} given up by the client's timeout, {lingering} half-open"),
        )
        .await;
    tokio::task::spawn_blocking(|| {
        suite::drop_database(&format!("{NAME}_run"));
        suite::drop_database(&format!("{NAME}_run_ledger"));
    })
    .await
    .unwrap();
}

// ---------------------------------------------------------------------------------------
// The bounds, one at a time.

const BEGIN: &str =
    "SELECT outcome, attempt, recovered FROM idem_begin($1, $2, lease => $3::text::interval)";

/// `idem_begin` of `key` in scope `f7`: outcome, attempt, recovered.
async fn begin(
    c: &Client,
    key: &str,
    lease: &str,
) -> Result<(String, i32, bool), tokio_postgres::Error> {
    c.query_one(BEGIN, &[&"f7", &key, &lease])
        .await
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// The session named `app` in database `db`: pid, state, wait_event_type.
async fn session(c: &Client, db: &str, app: &str) -> Option<(i32, String, String)> {
    c.query_opt(
        "SELECT pid, coalesce(state, ''), coalesce(wait_event_type, '') \
         FROM pg_stat_activity WHERE datname = $1 AND application_name = $2",
        &[&db, &app],
    )
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// Locks held (granted) by `pid` on the records table, and all its granted locks.
async fn locks(c: &Client, pid: i32) -> (i64, i64) {
    let r = c
        .query_one(
            "SELECT count(*) FILTER (WHERE relation = 'idempotency.records'::regclass), count(*) \
             FROM pg_locks WHERE pid = $1 AND granted",
            &[&pid],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// A session of the test itself, which no advised timeout may end while it waits.
async fn helper(dsn: &str, app: &str) -> Client {
    let c = connect(&format!("{dsn} application_name={app}")).await;
    c.batch_execute(
        "SET idle_session_timeout = 0; SET idle_in_transaction_session_timeout = 0; \
         SET client_connection_check_interval = 0",
    )
    .await
    .unwrap();
    c
}

/// A client whose connection task is ours to abort: aborting it closes the socket, as the
/// kernel does when a client process dies.
async fn killable(dsn: &str) -> (Client, tokio::task::JoinHandle<()>) {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {dsn}: {e}"));
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, task)
}

/// What the bounds test measured, printed at its end.
#[derive(Debug, Default)]
struct Measured {
    client_gave_up: Vec<Duration>,
    lease_takeover: Option<Duration>,
    idle_session_ended: Option<Duration>,
    row_lock_released: Option<Duration>,
    duplicate_waited: Option<Duration>,
    vanished_waiter_ended: Option<Duration>,
    half_open_waiter_ended: Option<Duration>,
}

/// Calls `call` on a connection about to be cut and asserts the client gives up within
/// its bound, as a service's timeout does; how long it waited.
async fn give_up<T: std::fmt::Debug>(
    call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    what: &str,
) -> Duration {
    let started = Instant::now();
    let answer = tokio::time::timeout(CALL_TIMEOUT, call).await;
    assert!(
        answer.is_err(),
        "{what}: answered through a cut connection: {answer:?}"
    );
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_ends_a_half_open_session() {
    let db = format!("{NAME}_bounds");
    let db2 = db.clone();
    let server = tokio::task::spawn_blocking(move || server_database(&db2, true))
        .await
        .unwrap();
    let proxy = tcp_proxy(&server).await;
    let through = |app: &str| format!("{} application_name={app}", proxy.dsn(&server));
    let observer = helper(&server, "f7_observer").await;
    let mut m = Measured::default();

    // The advised settings are in force on a TCP session (keepalives are 0 elsewhere).
    let probe = connect(&through("f7_probe")).await;
    let idle: String = probe
        .query_one("SHOW tcp_keepalives_idle", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        idle, "1",
        "the keepalive setting does not apply to the proxy's sessions"
    );
    drop(probe);

    // A. A claim cut after its commit: the call holds the key by its lease only.
    let lease = Duration::from_secs(1);
    let cut_claim = connect(&through("f7_claim")).await;
    proxy.set_once(Fault::HalfOpen(
        Trigger::QueryContains("idem_begin".into()),
        Cut::AfterCommit,
    ));
    // Times are from the claim's invocation: its lease and its session's idleness start
    // a moment later, on the server.
    let cut_at = Instant::now();
    m.client_gave_up
        .push(give_up(begin(&cut_claim, "a", "1 second"), "a claim").await);
    assert_eq!(proxy.fired(), 1, "the claim's connection was not cut");
    let (pid, state, _) = session(&observer, &db, "f7_claim")
        .await
        .expect("the half-open session is gone at once");
    assert_eq!(state, "idle", "the claim's session after its statement");
    assert_eq!(
        locks(&observer, pid).await,
        (0, 0),
        "an idle session holds locks"
    );
    // The claim committed (the client does not know): a retry is in progress until the
    // lease lapses, then takes it over.
    let retry = helper(&server, "f7_retry").await;
    let first = begin(&retry, "a", "1 second").await.unwrap();
    assert_eq!(
        first.0, "in_progress",
        "the cut claim did not commit: {first:?}"
    );
    m.lease_takeover = within(lease + SLACK, || async {
        begin(&retry, "a", "1 second").await.unwrap().0 == "claimed"
    })
    .await
    .map(|_| cut_at.elapsed());
    let taken = m.lease_takeover.expect("no takeover within lease + slack");
    assert!(taken >= lease, "taken over before the lease lapsed: {m:?}");
    // Nothing tells the server; idle_session_timeout ends the idle session.
    m.idle_session_ended = within(IDLE_SESSION_TIMEOUT + SLACK, || async {
        session(&observer, &db, "f7_claim").await.is_none()
    })
    .await
    .map(|_| cut_at.elapsed());
    let ended = m
        .idle_session_ended
        .expect("idle_session_timeout did not end the session");
    assert!(
        ended >= IDLE_SESSION_TIMEOUT,
        "the idle session ended before its timeout: {m:?}"
    );

    // B. A claim inside an explicit transaction, cut at the next statement: the row lock
    // lasts until idle_in_transaction_session_timeout ends the session.
    let in_tx = connect(&through("f7_in_tx")).await;
    in_tx.batch_execute("BEGIN").await.unwrap();
    let claimed = begin(&in_tx, "b", "1 minute").await.unwrap();
    assert_eq!(claimed.0, "claimed");
    let idle_from = Instant::now();
    proxy.set_once(Fault::HalfOpen(
        Trigger::QueryContains("f7 effect".into()),
        Cut::Request,
    ));
    let gave_up = tokio::spawn(async move {
        let started = Instant::now();
        let effect = in_tx.query_one("SELECT 'f7 effect'", &[]);
        let answer = tokio::time::timeout(CALL_TIMEOUT, effect).await;
        (answer.is_err(), started.elapsed())
    });
    let cut = within(IDLE_IN_TRANSACTION, || async { proxy.fired() == 2 }).await;
    assert!(cut.is_some(), "the effect's connection was not cut");
    let (pid, state, _) = session(&observer, &db, "f7_in_tx").await.unwrap();
    assert_eq!(state, "idle in transaction");
    let (on_records, _) = locks(&observer, pid).await;
    assert!(
        on_records > 0,
        "the open claim holds no lock on the records"
    );
    // A duplicate (its own client, not cut) waits on the row lock.
    let duplicate = helper(&server, "f7_duplicate").await;
    let dup = tokio::spawn(async move {
        let started = Instant::now();
        let answer = begin(&duplicate, "b", "1 minute").await;
        (answer, started.elapsed())
    });
    let waiting = within(IDLE_IN_TRANSACTION, || async {
        matches!(session(&observer, &db, "f7_duplicate").await, Some((_, _, w)) if w == "Lock")
    })
    .await;
    let (timed_out, waited) = gave_up.await.unwrap();
    assert!(
        timed_out,
        "the effect was answered through a cut connection"
    );
    m.client_gave_up.push(waited);
    m.row_lock_released = within(IDLE_IN_TRANSACTION + SLACK, || async {
        session(&observer, &db, "f7_in_tx").await.is_none()
    })
    .await
    .map(|_| idle_from.elapsed());
    let released = m
        .row_lock_released
        .expect("idle_in_transaction_session_timeout did not end the session");
    assert!(
        released + Duration::from_millis(100) >= IDLE_IN_TRANSACTION,
        "ended before its timeout: {m:?}"
    );
    let (answer, waited) = dup.await.unwrap();
    m.duplicate_waited = Some(waited);
    // The claim vanished with its transaction: the duplicate claims anew.
    assert_eq!(
        answer.unwrap(),
        ("claimed".to_string(), 1, false),
        "the duplicate after the half-open transaction ended"
    );
    assert!(
        waiting.is_some(),
        "the duplicate never waited on the row lock: {m:?}"
    );

    // C. A duplicate waiting on a row lock whose client goes away (its socket closed):
    // client_connection_check_interval ends it while the lock is still held; without it,
    // it goes on waiting.
    let holder = helper(&server, "f7_holder").await;
    holder.batch_execute("BEGIN").await.unwrap();
    assert_eq!(begin(&holder, "c", "1 minute").await.unwrap().0, "claimed");
    for checked in [true, false] {
        let app = if checked {
            "f7_vanish"
        } else {
            "f7_vanish_unchecked"
        };
        let options = if checked {
            String::new()
        } else {
            " options='-c client_connection_check_interval=0'".into()
        };
        let (waiter, task) = killable(&format!("{server} application_name={app}{options}")).await;
        let call = tokio::spawn(async move {
            let _ = begin(&waiter, "c", "1 minute").await;
        });
        let blocked = within(Duration::from_secs(10), || async {
            matches!(session(&observer, &db, app).await, Some((_, _, w)) if w == "Lock")
        })
        .await;
        assert!(blocked.is_some(), "{app} did not wait on the row lock");
        task.abort();
        let gone_at = Instant::now();
        if checked {
            m.vanished_waiter_ended = within(CHECK_INTERVAL + SLACK, || async {
                session(&observer, &db, app).await.is_none()
            })
            .await
            .map(|_| gone_at.elapsed());
            assert!(
                m.vanished_waiter_ended.is_some(),
                "client_connection_check_interval did not end a waiter whose client left: {m:?}"
            );
        } else {
            // Four check intervals and more: still waiting, nothing looks at the socket.
            let ended = within(4 * CHECK_INTERVAL + SLACK, || async {
                session(&observer, &db, app).await.is_none()
            })
            .await;
            assert_eq!(ended, None, "a waiter ended without the check interval");
        }
        call.abort();
    }
    // The holder still holds (the waiters ended, the lock did not move).
    assert!(
        locks(
            &observer,
            session(&observer, &db, "f7_holder").await.unwrap().0
        )
        .await
        .0 > 0
    );

    // D. A duplicate waiting on that lock behind a silent half-open connection: no FIN, and
    // its peer's kernel still answers keepalives, so neither setting ends it; its
    // statement_timeout does.
    let statement_timeout = KEEPALIVE_BOUND + Duration::from_secs(2);
    let silent = connect(&format!(
        "{} options='-c statement_timeout={}'",
        through("f7_silent"),
        statement_timeout.as_millis()
    ))
    .await;
    proxy.set_once(Fault::HalfOpen(
        Trigger::QueryContains("idem_begin".into()),
        Cut::AfterCommit,
    ));
    let waits = tokio::spawn(async move {
        let _ = tokio::time::timeout(CALL_TIMEOUT, begin(&silent, "c", "1 minute")).await;
        // The client is gone from here on; the connection stays half-open.
        std::future::pending::<()>().await;
    });
    let blocked = within(Duration::from_secs(10), || async {
        matches!(session(&observer, &db, "f7_silent").await, Some((_, _, w)) if w == "Lock")
    })
    .await;
    assert!(
        blocked.is_some(),
        "the half-open waiter did not wait on the row lock"
    );
    let since = Instant::now();
    // Past the keepalives' bound and many check intervals, it still waits.
    let ended = within(KEEPALIVE_BOUND + CHECK_INTERVAL, || async {
        !matches!(session(&observer, &db, "f7_silent").await, Some((_, _, w)) if w == "Lock")
    })
    .await;
    assert_eq!(
        ended, None,
        "something other than statement_timeout ended the wait"
    );
    m.half_open_waiter_ended = within(SLACK * 2, || async {
        !matches!(session(&observer, &db, "f7_silent").await, Some((_, _, w)) if w == "Lock")
    })
    .await
    .map(|_| since.elapsed());
    assert!(
        m.half_open_waiter_ended.is_some(),
        "statement_timeout did not end the wait: {m:?}"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    waits.abort();
    for t in &m.client_gave_up {
        assert!(
            *t < CALL_TIMEOUT + Duration::from_millis(200),
            "the client's bound: {m:?}"
        );
    }
    eprintln!("measured: {m:#?}");
    drop(proxy);
    drop(observer);
    tokio::task::spawn_blocking(move || suite::drop_database(&db))
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// The Rust client over a pool.

/// A call through `PgStore` over a deadpool pool (its default recycling) whose connection
/// goes half-open is given up by the caller's timeout (what the dispatcher's
/// `Idempotent::timeout` does); the next calls must not be handed that connection again. (They
/// were, until the client took a connection whose call was dropped mid-statement out of the
/// pool: the pool's quick check only asks whether it is closed, and every later call that
/// got it waited behind the lost answer until its own timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_cut_mid_call_is_not_reused() {
    use deadpool_postgres::{Manager, ManagerConfig, Pool};
    use pg_idempotency_client::{BeginOptions, IdempotencyStore, PgStore};

    let db = format!("{NAME}_pool");
    let db2 = db.clone();
    let server = tokio::task::spawn_blocking(move || server_database(&db2, false))
        .await
        .unwrap();
    let proxy = tcp_proxy(&server).await;
    let config: tokio_postgres::Config = proxy.dsn(&server).parse().unwrap();
    let manager = Manager::from_config(config, NoTls, ManagerConfig::default());
    // One connection, so that the next call is sure to be offered the cut one.
    let pool = Pool::builder(manager).max_size(1).build().unwrap();
    let store = PgStore::new(pool);
    let options = BeginOptions::default();
    // The pool prepares each statement once per connection: the first call's Parse is the
    // one the fault can see.
    proxy.set_once(Fault::HalfOpen(
        Trigger::QueryContains("idem_begin".into()),
        Cut::Request,
    ));
    let cut = tokio::time::timeout(CALL_TIMEOUT, store.begin("f7", "p0", &options)).await;
    assert!(cut.is_err(), "answered through a cut connection");
    assert_eq!(proxy.fired(), 1);
    for n in 1..=3 {
        let key = format!("p{n}");
        let next =
            tokio::time::timeout(Duration::from_secs(5), store.begin("f7", &key, &options)).await;
        assert!(
            matches!(next, Ok(Ok(_))),
            "call {n} after the cut one: {:?} (the half-open connection was reused)",
            next.map(|r| r.map(|_| ()))
        );
    }
    drop(proxy);
    tokio::task::spawn_blocking(move || suite::drop_database(&db))
        .await
        .unwrap();
}
