//! The state machine through the proxy: a caller cannot tell it from one server, and each
//! record lives on the partition its scope and key hash to, and on no other.

use std::sync::mpsc;
use std::thread;

use pg_idempotency_protocol::ErrorCode;
use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

#[test]
fn claim_duplicate_complete_replay_on_the_keys_partition() {
    let Some(s) = Sharded::new("calls", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("calls");
    for key in ["a", "b", "c", "d", "e", "f"] {
        let first = begin(&mut c, &scope, key);
        assert_eq!(first.outcome, "claimed");
        assert_eq!(first.attempt, 1);
        let fence = first.fence.expect("a claim has a fence");
        let dup = begin(&mut c, &scope, key);
        assert_eq!(dup.outcome, "in_progress");
        assert_eq!(
            dup.fence, None,
            "a duplicate never learns the holder's fence"
        );
        assert_eq!(
            complete(&mut c, &scope, key, fence, r#"{"sent": 1}"#).unwrap(),
            "succeeded"
        );
        let again = begin(&mut c, &scope, key);
        assert_eq!(again.outcome, "replay");
        assert_eq!(again.response.as_deref(), Some(r#"{"sent": 1}"#));
        assert_eq!(again.upstream_key, first.upstream_key);
        assert_eq!(
            s.holders(&scope, key),
            vec![s.partition_of(&scope, key)],
            "key {key}"
        );
    }
}

#[test]
fn a_hash_input_call_meets_the_same_call_with_its_key_spelled_out() {
    let Some(s) = Sharded::new("hashinput", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("hashinput");
    let request = r#"{"to": "ann@example.com", "n": 1.0}"#;
    let row = c
        .query_one(
            "SELECT outcome, fence, key FROM idem_begin($1, NULL, $2::text::jsonb)",
            &[&scope, &request],
        )
        .unwrap();
    let (outcome, fence, key): (String, Option<i64>, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(outcome, "claimed");
    // The key is the request's canonical hash, whichever spelling the request had.
    let canonical = r#"{"n":1,"to":"ann@example.com"}"#;
    let expected: String = c
        .query_one(
            "SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')",
            &[&canonical],
        )
        .unwrap()
        .get(0);
    assert_eq!(key, expected);
    assert_eq!(s.holders(&scope, &key), vec![s.partition_of(&scope, &key)]);
    complete(&mut c, &scope, &key, fence.unwrap(), r#"{"ok": true}"#).unwrap();
    let again = try_begin(&mut c, &scope, &key, Some(request), None, None).unwrap();
    assert_eq!(again.outcome, "replay");
}

#[test]
fn the_partitions_refusals_reach_the_caller_with_their_sqlstates() {
    let Some(s) = Sharded::new("refusals", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("refusals");
    let first = try_begin(&mut c, &scope, "k", Some(r#"{"a": 1}"#), None, None).unwrap();
    let other = try_begin(&mut c, &scope, "k", Some(r#"{"a": 2}"#), None, None).unwrap_err();
    assert_eq!(sqlstate(&other), ErrorCode::Mismatch.sqlstate());
    let fence = first.fence.unwrap();
    let stale = complete(&mut c, &scope, "k", fence + 1, "{}").unwrap_err();
    assert_eq!(sqlstate(&stale), ErrorCode::LeaseLost.sqlstate());
    let blank = try_begin(&mut c, &scope, " ", None, None, None).unwrap_err();
    assert_eq!(sqlstate(&blank), ErrorCode::InvalidArgument.sqlstate());
    // The detail and hint come along.
    let db = blank.as_db_error().expect("a server error");
    assert!(db.hint().is_some(), "no hint: {db:?}");
    assert_eq!(
        s.holders(&scope, " "),
        Vec::<usize>::new(),
        "a refusal wrote a record"
    );
    assert_eq!(
        complete(&mut c, &scope, "k", fence, "{}").unwrap(),
        "succeeded"
    );
}

#[test]
fn a_lapsed_lease_is_taken_over_with_a_higher_fence_and_the_same_upstream_key() {
    let Some(s) = Sharded::new("takeover", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("takeover");
    let first = try_begin(&mut c, &scope, "k", None, Some("200 ms"), None).unwrap();
    wait_for_lapse(&mut c, &scope, "k");
    let second = begin(&mut c, &scope, "k");
    assert_eq!(second.outcome, "claimed");
    assert!(second.recovered);
    assert_eq!(second.attempt, 2);
    assert!(second.fence.unwrap() > first.fence.unwrap());
    assert_eq!(second.upstream_key, first.upstream_key);
    let late = complete(&mut c, &scope, "k", first.fence.unwrap(), "{}").unwrap_err();
    assert_eq!(sqlstate(&late), ErrorCode::LeaseLost.sqlstate());
    complete(&mut c, &scope, "k", second.fence.unwrap(), "{}").unwrap();
}

#[test]
fn a_waiting_duplicate_replays_the_holders_result() {
    let Some(s) = Sharded::new("wait", 2) else {
        return;
    };
    let scope = scope("wait");
    let mut holder = s.connect();
    let claim = begin(&mut holder, &scope, "k");
    let partition_db = s.partitions[s.partition_of(&scope, "k")]
        .split_whitespace()
        .find_map(|p| p.strip_prefix("dbname="))
        .unwrap()
        .to_string();
    let (tx, rx) = mpsc::channel();
    let mut waiter = s.connect();
    let s2 = scope.clone();
    let t = thread::spawn(move || {
        tx.send(()).unwrap();
        try_begin(&mut waiter, &s2, "k", None, None, Some("30 s")).unwrap()
    });
    rx.recv().unwrap();
    // The duplicate waits inside the partition's idem_begin (on a latch, or in pg_sleep).
    let mut partition = s.partition(0);
    wait_until("the duplicate to wait on its partition", PATIENCE, || {
        partition
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state = 'active' \
                 AND query LIKE '%idem_begin%' AND wait_event IN ('Extension', 'PgSleep')",
                &[&partition_db],
            )
            .map(|r| r.get::<_, i64>(0) == 1)
            .unwrap_or(false)
    });
    complete(
        &mut holder,
        &scope,
        "k",
        claim.fence.unwrap(),
        r#"{"sent": 1}"#,
    )
    .unwrap();
    let b = t.join().unwrap();
    assert_eq!(b.outcome, "replay");
    assert_eq!(b.response.as_deref(), Some(r#"{"sent": 1}"#));
}

#[test]
fn lookup_release_extend_and_forget_find_the_record_on_its_partition() {
    let Some(s) = Sharded::new("lookup", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("lookup");
    let claim = begin(&mut c, &scope, "k");
    let fence = claim.fence.unwrap();
    let row = c
        .query_one(
            "SELECT state, fence, owner::text FROM idem_lookup($1, 'k')",
            &[&scope],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "in_progress");
    assert_eq!(row.get::<_, i64>(1), fence);
    assert_eq!(row.get::<_, String>(2), "postgres");
    let extended: bool = c
        .query_one(
            "SELECT lease_until > clock_timestamp() + interval '50 minutes' \
             FROM idem_extend($1, 'k', $2, interval '1 hour')",
            &[&scope, &fence],
        )
        .unwrap()
        .get(0);
    assert!(extended);
    c.execute("SELECT idem_release($1, 'k', $2)", &[&scope, &fence])
        .unwrap();
    assert_eq!(s.holders(&scope, "k"), Vec::<usize>::new());
    let again = begin(&mut c, &scope, "k");
    complete(&mut c, &scope, "k", again.fence.unwrap(), "{}").unwrap();
    let forgot: bool = c
        .query_one("SELECT idem_forget($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert!(forgot);
    assert_eq!(
        begin(&mut c, &scope, "k").attempt,
        1,
        "a forgotten call runs again"
    );
}

#[test]
fn a_proxy_transaction_does_not_hold_the_claim() {
    // PL/Proxy runs each call in a transaction of its own on the partition: the claim is
    // committed there whatever the proxy's transaction does. docs/scaling.md says so:
    // exactly-once with a write of the caller's needs the partition itself.
    let Some(s) = Sharded::new("txn", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("txn");
    let mut t = c.transaction().unwrap();
    let outcome: String = t
        .query_one("SELECT outcome FROM idem_begin($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert_eq!(outcome, "claimed");
    t.rollback().unwrap();
    assert_eq!(begin(&mut c, &scope, "k").outcome, "in_progress");
}
