//! `retry_after` (0.5.0): a duplicate is told the running call's estimated time left
//! (pg_idempotency_protocol::estimate), not the time until the holder's lease lapses. The estimate is the
//! scope's claim-to-completion time; each test makes its own scope, so with one completed
//! call the estimate is exactly that call's time, in both backends.

use std::time::Duration;

use pg_idempotency_protocol::estimate::{FLOOR_MS, UNKNOWN_MS};
use pg_idempotency_tests::*;

/// A lease far longer than any call here: a retry_after near it is the old, lease-based one.
const LONG_LEASE: &str = "60 s";

/// idem_begin's outcome and retry_after (in microseconds) for (scope, key).
fn duplicate(c: &mut Client, scope: &str, key: &str) -> (String, Option<i64>) {
    let row = c
        .query_one(
            "SELECT outcome, (extract(epoch FROM retry_after) * 1000000)::int8 \
             FROM idem_begin(scope => $1, key => $2, lease => $3::text::interval)",
            &[&scope, &key, &LONG_LEASE],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

fn claim(c: &mut Client, scope: &str, key: &str, lease: &str) -> i64 {
    let b = try_begin(c, scope, key, None, Some(lease), None).unwrap();
    assert_eq!(b.outcome, "claimed", "{scope}/{key}");
    b.fence.unwrap()
}

/// The server's microseconds since the record's claim (its creation: attempt 1).
fn since_created(c: &mut Client, scope: &str, key: &str) -> i64 {
    c.query_one(
        "SELECT (extract(epoch FROM clock_timestamp() - created_at) * 1000000)::int8 \
         FROM idem_lookup($1, $2)",
        &[&scope, &key],
    )
    .unwrap()
    .get(0)
}

/// Completes (scope, key) once at least `took` has passed since its claim, by the server's
/// clock; returns the call's time from claim to completion as the record shows it.
fn complete_after(c: &mut Client, scope: &str, key: &str, fence: i64, took: Duration) -> i64 {
    wait_until("the call's time to pass", Duration::from_secs(30), || {
        since_created(c, scope, key) >= took.as_micros() as i64
    });
    complete(c, scope, key, fence, "{}").unwrap();
    c.query_one(
        "SELECT (extract(epoch FROM completed_at - created_at) * 1000000)::int8 \
         FROM idem_lookup($1, $2)",
        &[&scope, &key],
    )
    .unwrap()
    .get(0)
}

#[test]
fn a_scope_without_a_completed_call_answers_one_second_within_the_lease() {
    let mut c = connect();
    let s = scope("retry-unknown");
    claim(&mut c, &s, "k", LONG_LEASE);
    assert_eq!(
        duplicate(&mut c, &s, "k"),
        ("in_progress".to_string(), Some(UNKNOWN_MS as i64 * 1000))
    );
    // A lease shorter than that bounds it.
    claim(&mut c, &s, "short", "400 ms");
    let (_, after) = duplicate(&mut c, &s, "short");
    let after = after.unwrap();
    assert!(after > 0 && after <= 400_000, "retry_after {after} µs");
}

#[test]
fn a_duplicate_is_told_the_running_calls_estimated_time_left() {
    let mut c = connect();
    let s = scope("retry-estimate");
    let f = claim(&mut c, &s, "first", LONG_LEASE);
    let took = complete_after(&mut c, &s, "first", f, Duration::from_millis(1500));
    claim(&mut c, &s, "second", LONG_LEASE);
    let (outcome, after) = duplicate(&mut c, &s, "second");
    let elapsed = since_created(&mut c, &s, "second");
    let after = after.unwrap();
    assert_eq!(outcome, "in_progress");
    // estimate − elapsed at the duplicate's moment, which lies between the claim and now.
    assert!(
        after <= took && after >= took - elapsed,
        "retry_after {after} µs, the call took {took} µs, {elapsed} µs since the claim"
    );
    assert!(after > 1_000_000, "retry_after {after} µs");
}

#[test]
fn a_call_running_past_its_estimate_is_polled_at_the_floor() {
    let mut c = connect();
    let s = scope("retry-floor");
    let f = claim(&mut c, &s, "first", LONG_LEASE);
    let took = complete_after(&mut c, &s, "first", f, Duration::from_millis(200));
    claim(&mut c, &s, "late", LONG_LEASE);
    wait_until(
        "the running call to pass its estimate",
        Duration::from_secs(30),
        || since_created(&mut c, &s, "late") > took + FLOOR_MS as i64 * 1000,
    );
    assert_eq!(
        duplicate(&mut c, &s, "late"),
        ("in_progress".to_string(), Some(FLOOR_MS as i64 * 1000))
    );
}

#[test]
fn a_takeover_counts_from_its_own_claim() {
    let mut c = connect();
    let s = scope("retry-takeover");
    let f = claim(&mut c, &s, "first", LONG_LEASE);
    let took = complete_after(&mut c, &s, "first", f, Duration::from_millis(1500));
    // A claim whose lease (2 s) lapses after more than the estimate has passed since the
    // record was created; the takeover's duplicate is timed from the takeover.
    claim(&mut c, &s, "k", "2 s");
    wait_for_lapse(&mut c, &s, "k");
    let taken = try_begin(&mut c, &s, "k", None, Some(LONG_LEASE), None).unwrap();
    assert_eq!((taken.outcome.as_str(), taken.recovered), ("claimed", true));
    let (outcome, after) = duplicate(&mut c, &s, "k");
    assert_eq!(outcome, "in_progress");
    let after = after.unwrap();
    assert!(
        since_created(&mut c, &s, "k") > took,
        "the record is older than the estimate"
    );
    // From the record's creation it would be the floor.
    assert!(
        after > 1_000_000 && after <= took,
        "retry_after {after} µs after a takeover, the call took {took} µs"
    );
}

#[test]
fn a_new_scope_gets_its_estimate_however_many_scopes_came_before() {
    if backend() == Backend::Portable {
        skip(
            Skip::NotApplicable,
            "extension only: the PL/pgSQL variant keeps no table of estimates (it reads the \
             scope's records)",
        );
        return;
    }
    // A server of its own: the flood of scopes below must not crowd the counters of the
    // server under test.
    let server = TempCluster::start(
        "estimates",
        &["shared_preload_libraries = 'pg_idempotency'"],
    );
    let mut c = connect_to(&server.dsn("postgres"));
    c.batch_execute("CREATE EXTENSION pg_idempotency").unwrap();
    // Twice as many scopes as the table has slots, each with a completed call.
    c.batch_execute(
        "SELECT idem_complete(s, 'k', (idem_begin(s, 'k')).fence, '{}') \
         FROM (SELECT 'flood-' || i AS s FROM generate_series(1, 8192) AS i) AS scopes",
    )
    .unwrap();
    let s = scope("retry-after-flood");
    let f = claim(&mut c, &s, "first", LONG_LEASE);
    let took = complete_after(&mut c, &s, "first", f, Duration::from_millis(1500));
    claim(&mut c, &s, "second", LONG_LEASE);
    let (outcome, after) = duplicate(&mut c, &s, "second");
    let after = after.unwrap();
    assert_eq!(outcome, "in_progress");
    assert!(
        after > 1_000_000 && after <= took,
        "retry_after {after} µs: not the scope's estimate ({took} µs)"
    );
}
