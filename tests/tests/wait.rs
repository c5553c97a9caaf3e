//! `wait`: a duplicate waits for a live holder and replays its result.

use std::thread;
use std::time::{Duration, Instant};

use pg_idempotency_tests::*;

#[test]
fn a_waiting_duplicate_replays_the_holders_result() {
    let scope = scope("wait-replay");
    let mut holder = connect();
    let claim = begin(&mut holder, &scope, "k");
    let s2 = scope.clone();
    let waiter = thread::spawn(move || {
        let mut c = connect();
        let started = Instant::now();
        let b = try_begin(&mut c, &s2, "k", None, None, Some("10 s")).unwrap();
        (b, started.elapsed())
    });
    thread::sleep(Duration::from_millis(300));
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
        waited >= Duration::from_millis(250),
        "returned before the holder finished: {waited:?}"
    );
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
