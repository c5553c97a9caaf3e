//! `wait`: a duplicate waits for a live holder and replays its result.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pg_idempotency_tests::*;

#[test]
fn a_waiting_duplicate_replays_the_holders_result() {
    let scope = scope("wait-replay");
    let mut holder = connect();
    let claim = begin(&mut holder, &scope, "k");
    let s2 = scope.clone();
    let (pid_tx, pid_rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let mut c = connect();
        let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        pid_tx.send(pid).unwrap();
        let started = Instant::now();
        let b = try_begin(&mut c, &s2, "k", None, None, Some("10 s")).unwrap();
        (b, started.elapsed())
    });
    // The holder completes once the duplicate is seen waiting inside idem_begin: on a latch
    // (the extension) or in pg_sleep between looks (the portable variant).
    let pid = pid_rx.recv().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            holder
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' \
                     AND query LIKE '%idem_begin%' AND wait_event IN ('Extension', 'PgSleep')",
                    &[&pid],
                )
                .map(|r| r.get::<_, i64>(0) == 1)
                .unwrap_or(false)
        }),
        "the duplicate was never seen waiting"
    );
    complete(
        &mut holder,
        &scope,
        "k",
        claim.fence.unwrap(),
        r#"{"sent": 1}"#,
    )
    .unwrap();
    let (b, waited) = waiter.join().unwrap();
    assert_eq!(b.outcome, "replay");
    assert_eq!(b.response.as_deref(), Some(r#"{"sent": 1}"#));
    assert!(
        waited < Duration::from_secs(9),
        "waited the whole bound: {waited:?}"
    );
}

#[test]
fn a_wait_that_runs_out_answers_in_progress() {
    let scope = scope("wait-timeout");
    let mut holder = connect();
    begin(&mut holder, &scope, "k");
    let mut c = connect();
    let started = Instant::now();
    let b = try_begin(&mut c, &scope, "k", None, None, Some("300 ms")).unwrap();
    assert_eq!(b.outcome, "in_progress");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn a_wait_outlasting_the_holders_lease_takes_the_call_over() {
    let scope = scope("wait-lapse");
    let mut holder = connect();
    let first = try_begin(&mut holder, &scope, "k", None, Some("200 ms"), None).unwrap();
    let mut c = connect();
    let b = try_begin(&mut c, &scope, "k", None, None, Some("5 s")).unwrap();
    assert_eq!(b.outcome, "claimed");
    assert!(b.recovered);
    assert_eq!(b.upstream_key, first.upstream_key);
}

#[test]
fn a_wait_is_cancelled_by_statement_timeout() {
    let scope = scope("wait-cancel");
    let mut holder = connect();
    begin(&mut holder, &scope, "k");
    let mut c = connect();
    c.batch_execute("SET statement_timeout = '200ms'").unwrap();
    let err = try_begin(&mut c, &scope, "k", None, None, Some("10 s")).unwrap_err();
    assert_eq!(sqlstate(&err), "57014");
}
