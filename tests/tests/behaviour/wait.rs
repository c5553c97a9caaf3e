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

/// A holder that claimed with a 3 s lease and never extends has stopped beating once two
/// thirds of it passed (pg_idempotency_protocol::estimate): a duplicate waiting up to 30 s answers
/// in_progress then, while the lease still runs, told the lease's time left; the holder
/// keeps the call. (Until 0.9.0 it waited out the lease and took the call over.)
#[test]
fn a_wait_on_a_holder_that_stopped_beating_ends_before_the_lease() {
    let scope = scope("wait-stopped");
    let mut holder = connect();
    let first = try_begin(&mut holder, &scope, "k", None, Some("3 s"), None).unwrap();
    assert_eq!(first.outcome, "claimed");
    let mut c = connect();
    let row = c
        .query_one(
            "SELECT b.outcome, b.upstream_key::text, \
                    (extract(epoch FROM b.retry_after) * 1000000)::int8, \
                    (extract(epoch FROM b.lease_until - clock_timestamp()) * 1000000)::int8, \
                    (extract(epoch FROM clock_timestamp() - (b.lease_until - interval '3 s')) \
                        * 1000000)::int8 \
             FROM idem_begin($1, 'k', wait => '30 s') AS b",
            &[&scope],
        )
        .unwrap();
    let (outcome, upstream, retry_after, left, ran): (String, String, Option<i64>, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(outcome, "in_progress", "the waiter did not stop waiting");
    let retry_after = retry_after.unwrap_or_default();
    assert_eq!(upstream, first.upstream_key);
    assert!(left > 0, "answered {}us after the lease ended", -left);
    assert!(
        ran >= 1_990_000,
        "answered {ran}us into the lease, before it stopped"
    );
    assert!(
        retry_after >= left && retry_after <= 1_000_000,
        "retry_after {retry_after}us is not the lease left ({left}us when answered)"
    );
    let held = holder
        .query_one(
            "SELECT fence, state, lease_length::text FROM idempotency.records \
             WHERE scope = $1 AND key = 'k'",
            &[&scope],
        )
        .unwrap();
    assert_eq!(
        held.get::<_, i64>(0),
        first.fence.unwrap(),
        "the holder keeps the call"
    );
    assert_eq!(held.get::<_, String>(1), "in_progress");
    assert_eq!(
        held.get::<_, Option<String>>(2).as_deref(),
        Some("00:00:03")
    );
}

/// A claim keeps the length of its lease, an extension the length it took: what a
/// duplicate judges the holder by.
#[test]
fn the_record_keeps_the_length_of_the_lease_last_taken() {
    let scope = scope("lease-length");
    let mut c = connect();
    let claim = try_begin(&mut c, &scope, "k", None, Some("1 minute"), None).unwrap();
    let length = |c: &mut Client| -> Option<String> {
        c.query_one(
            "SELECT lease_length::text FROM idempotency.records WHERE scope = $1",
            &[&scope],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(length(&mut c).as_deref(), Some("00:01:00"));
    c.execute(
        "SELECT idem_extend($1, 'k', $2, '5 s')",
        &[&scope, &claim.fence.unwrap()],
    )
    .unwrap();
    assert_eq!(length(&mut c).as_deref(), Some("00:00:05"));
    // About 5 s left of a 5 s lease: the holder beats, and a duplicate is told the scope's
    // unknown estimate (1 s), not the lease left (by the claim's minute it had stopped).
    let row = c
        .query_one(
            "SELECT outcome, (extract(epoch FROM retry_after) * 1000000)::int8 \
             FROM idem_begin($1, 'k')",
            &[&scope],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "in_progress");
    assert_eq!(row.get::<_, i64>(1), 1_000_000);
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
