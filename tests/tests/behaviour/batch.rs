//! The batch API (0.6.0): `idem_begin_batch` answers each item as `idem_begin` would answer
//! it alone (a single call's refusal is its item's outcome), `idem_complete_batch`
//! completes each item under its fence (a lost lease is its item's outcome); a bad argument
//! anywhere fails the whole batch and changes nothing; batches that share keys in any
//! order never deadlock, and each key is claimed once.

use std::sync::{Arc, Barrier};
use std::thread;

use pg_idempotency_tests::*;

/// One item's answer: (item, outcome, fence, key, response, retry_after is set).
type Item = (i32, String, Option<i64>, String, Option<String>, bool);

const BEGIN_BATCH: &str =
    "SELECT item, outcome, fence, key, response::text, retry_after IS NOT NULL \
     FROM idem_begin_batch(scope => $1, keys => $2, requests => $3::text[]::jsonb[], \
                           on_cache_hit => $4, claim_tokens => $5::text[]::uuid[])";

fn try_begin_batch(
    c: &mut Client,
    scope: &str,
    keys: Option<&[Option<&str>]>,
    requests: Option<&[Option<&str>]>,
    on_cache_hit: Option<&str>,
    tokens: Option<&[Option<&str>]>,
) -> Result<Vec<Item>, postgres::Error> {
    let keys: Option<Vec<Option<String>>> =
        keys.map(|k| k.iter().map(|s| s.map(str::to_string)).collect());
    let requests: Option<Vec<Option<String>>> =
        requests.map(|r| r.iter().map(|s| s.map(str::to_string)).collect());
    let tokens: Option<Vec<Option<String>>> =
        tokens.map(|t| t.iter().map(|s| s.map(str::to_string)).collect());
    Ok(c.query(
        BEGIN_BATCH,
        &[&scope, &keys, &requests, &on_cache_hit, &tokens],
    )?
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect())
}

fn begin_batch(c: &mut Client, scope: &str, keys: &[&str]) -> Vec<Item> {
    let keys: Vec<Option<&str>> = keys.iter().map(|k| Some(*k)).collect();
    try_begin_batch(c, scope, Some(&keys), None, None, None)
        .unwrap_or_else(|e| panic!("idem_begin_batch: {e}"))
}

/// One item's completion: (item, key, outcome, state).
type Done = (i32, String, String, Option<String>);

fn try_complete_batch(
    c: &mut Client,
    scope: &str,
    keys: &[&str],
    fences: &[i64],
    responses: &[&str],
    succeeded: Option<&[bool]>,
    cache_failure: Option<&[bool]>,
) -> Result<Vec<Done>, postgres::Error> {
    let responses: Vec<String> = responses.iter().map(|r| r.to_string()).collect();
    Ok(c.query(
        "SELECT item, key, outcome, state \
         FROM idem_complete_batch($1, $2, $3, $4::text[]::jsonb[], $5, $6)",
        &[
            &scope,
            &keys,
            &fences,
            &responses,
            &succeeded.map(<[bool]>::to_vec),
            &cache_failure.map(<[bool]>::to_vec),
        ],
    )?
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect())
}

fn outcomes(items: &[Item]) -> Vec<(i32, &str)> {
    items.iter().map(|i| (i.0, i.1.as_str())).collect()
}

fn records(c: &mut Client, scope: &str) -> Vec<(String, String)> {
    c.query(
        "SELECT key, state FROM idempotency.records WHERE scope = $1 ORDER BY key",
        &[&scope],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn each_item_is_answered_as_a_single_call_would_be_in_the_order_given() {
    let mut c = connect();
    let s = scope("batch-answers");
    // done: completed; running: claimed, live; other: claimed with another request.
    let done = begin(&mut c, &s, "done");
    complete(&mut c, &s, "done", done.fence.unwrap(), r#"{"sent": 1}"#).unwrap();
    begin(&mut c, &s, "running");
    try_begin(&mut c, &s, "other", Some(r#"{"to": "ann"}"#), None, None).unwrap();

    let hashed = r#"{"b": 2, "a": 1}"#;
    let keys = [
        Some("new"),
        Some("done"),
        Some("running"),
        Some("other"),
        None,
        Some("new"),
    ];
    let requests = [
        None,
        None,
        None,
        Some(r#"{"to": "bob"}"#),
        Some(hashed),
        None,
    ];
    let items = try_begin_batch(&mut c, &s, Some(&keys), Some(&requests), None, None).unwrap();
    assert_eq!(
        outcomes(&items),
        [
            (1, "claimed"),
            (2, "replay"),
            (3, "in_progress"),
            (4, "mismatch"),
            (5, "claimed"),
            // The same key again: the first item holds it now.
            (6, "in_progress"),
        ]
    );
    assert!(items[0].2.is_some(), "a claim has its fence");
    assert!(
        items[1..4].iter().all(|i| i.2.is_none()) && items[5].2.is_none(),
        "no other item learns a fence: {items:?}"
    );
    assert_eq!(items[1].4.as_deref(), Some(r#"{"sent": 1}"#), "the replay");
    assert!(items[2].5 && items[5].5, "in_progress tells when to retry");
    // A NULL key is the request's HASH_INPUT key, as idem_begin derives it.
    let derived: String = c
        .query_one(
            "SELECT encode(idem_hash($1::text::jsonb), 'hex')",
            &[&hashed],
        )
        .unwrap()
        .get(0);
    assert_eq!(items[4].3, derived);
    assert_eq!(
        try_begin(
            &mut c,
            &s,
            &derived,
            Some(r#"{"a": 1, "b": 2}"#),
            None,
            None
        )
        .unwrap()
        .outcome,
        "in_progress",
        "a single call meets the batch's claim of the derived key"
    );

    // fail_fast: a repeat of a completed call is that item's outcome, not an error.
    let items = try_begin_batch(
        &mut c,
        &s,
        Some(&[Some("done"), Some("fresh")]),
        None,
        Some("fail_fast"),
        None,
    )
    .unwrap();
    assert_eq!(outcomes(&items), [(1, "refused"), (2, "claimed")]);
    assert_eq!(begin_batch(&mut c, &s, &[]), Vec::<Item>::new(), "no items");
}

#[test]
fn completes_each_item_under_its_fence_and_a_lost_lease_is_that_items_outcome() {
    let mut c = connect();
    let s = scope("batch-complete");
    let claims = begin_batch(&mut c, &s, &["a", "b", "c", "d"]);
    let fence = |i: usize| claims[i].2.unwrap();
    let done = try_complete_batch(
        &mut c,
        &s,
        &["a", "b", "c", "d"],
        &[fence(0), fence(1) + 1_000_000, fence(2), fence(3)],
        &[r#"{"n": 1}"#, r#"{"n": 2}"#, r#"{"n": 3}"#, r#"{"n": 4}"#],
        Some(&[true, true, false, false]),
        Some(&[false, false, true, false]),
    )
    .unwrap();
    let got: Vec<(i32, &str, &str, Option<&str>)> = done
        .iter()
        .map(|d| (d.0, d.1.as_str(), d.2.as_str(), d.3.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            (1, "a", "completed", Some("succeeded")),
            (2, "b", "lease_lost", None),
            (3, "c", "completed", Some("failed")),
            (4, "d", "completed", Some("absent")),
        ]
    );
    assert_eq!(
        records(&mut c, &s),
        [
            ("a".into(), "succeeded".into()),
            ("b".into(), "in_progress".into()),
            ("c".into(), "failed".into()),
        ],
        "b still runs under its own fence; d's uncached failure left nothing"
    );
    // Completing again with the fence that completed is a no-op that keeps the result (its
    // first reply may have been lost).
    let again = try_complete_batch(&mut c, &s, &["a"], &[fence(0)], &["{}"], None, None).unwrap();
    assert_eq!(again[0].2, "completed");
    let replay = begin_batch(&mut c, &s, &["a"]);
    assert_eq!(replay[0].4.as_deref(), Some(r#"{"n": 1}"#));
}

#[test]
fn a_bad_argument_anywhere_fails_the_whole_batch_and_changes_nothing() {
    let mut c = connect();
    let s = scope("batch-refused");
    let keys = [Some("a"), Some("b"), Some("  ")];
    let err = try_begin_batch(&mut c, &s, Some(&keys), None, None, None).unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    let db = err.as_db_error().unwrap();
    assert_eq!(db.message(), "key must not be blank");
    assert!(
        db.detail().unwrap().starts_with("Item 3 of the batch: "),
        "{db:?}"
    );
    assert!(db.hint().is_some());
    assert_eq!(records(&mut c, &s), [], "items 1 and 2 were not claimed");

    let err = try_begin_batch(
        &mut c,
        &s,
        Some(&[Some("a"), Some("b")]),
        Some(&[None]),
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(
        (
            sqlstate(&err).as_str(),
            err.as_db_error().unwrap().message()
        ),
        ("22023", "the arrays of a batch must have one length")
    );
    let err = try_begin_batch(&mut c, &s, Some(&[None]), None, None, None).unwrap_err();
    assert!(err
        .as_db_error()
        .unwrap()
        .detail()
        .unwrap()
        .starts_with("Item 1 of the batch: A NULL key asks"));
    let many: Vec<String> = (0..1001).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let err = c
        .query(
            "SELECT * FROM idem_begin_batch($1, $2)",
            &[&s, &many.to_vec()],
        )
        .unwrap_err();
    assert_eq!(
        err.as_db_error().unwrap().message(),
        "too many items in one batch"
    );
    assert_eq!(records(&mut c, &s), []);

    // A response over the limit in item 2: item 1 is not completed either.
    let claims = begin_batch(&mut c, &s, &["a", "b"]);
    let huge = format!(r#"{{"x": "{}"}}"#, "y".repeat(2 * 1024 * 1024));
    let err = try_complete_batch(
        &mut c,
        &s,
        &["a", "b"],
        &[claims[0].2.unwrap(), claims[1].2.unwrap()],
        &["{}", &huge],
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(sqlstate(&err), "IK004");
    assert!(err
        .as_db_error()
        .unwrap()
        .detail()
        .unwrap()
        .starts_with("Item 2 of the batch: "));
    assert_eq!(
        records(&mut c, &s),
        [
            ("a".into(), "in_progress".into()),
            ("b".into(), "in_progress".into())
        ]
    );
}

#[test]
fn a_repeat_of_the_batch_with_its_claim_tokens_gets_its_claims_back() {
    let mut c = connect();
    let s = scope("batch-tokens");
    let tokens = [
        Some("6f1c2f0e-9a53-4c1e-8d0a-3b7e2f4d5a61"),
        Some("0d4b8e7a-2c61-4f3e-9b15-7a8c6d5e4f32"),
    ];
    let keys = [Some("a"), Some("b")];
    let first = try_begin_batch(&mut c, &s, Some(&keys), None, None, Some(&tokens)).unwrap();
    // The reply was lost: the same batch again.
    let again = try_begin_batch(&mut c, &s, Some(&keys), None, None, Some(&tokens)).unwrap();
    assert_eq!(outcomes(&again), [(1, "claimed"), (2, "claimed")]);
    assert_eq!(
        again.iter().map(|i| i.2).collect::<Vec<_>>(),
        first.iter().map(|i| i.2).collect::<Vec<_>>(),
        "the same fences"
    );
    let other = try_begin_batch(&mut c, &s, Some(&keys), None, None, None).unwrap();
    assert_eq!(outcomes(&other), [(1, "in_progress"), (2, "in_progress")]);
}

/// Sessions that run batches of the same keys, each in another order, at the same moment:
/// every batch settles (items are claimed in key order, so no two batches wait on each
/// other), and each key is claimed by exactly one item of one batch. Claimed in the order
/// given, about one round in three deadlocks here (40P01); the rounds make that certain to
/// show.
#[test]
fn batches_sharing_keys_in_any_order_never_deadlock_and_claim_each_key_once() {
    for _ in 0..8 {
        batches_in_all_orders_at_once(&scope("batch-orders"));
    }
}

fn batches_in_all_orders_at_once(s: &str) {
    const SESSIONS: usize = 8;
    const KEYS: usize = 40;
    let s = s.to_string();
    let barrier = Arc::new(Barrier::new(SESSIONS));
    let handles: Vec<_> = (0..SESSIONS)
        .map(|n| {
            let (barrier, s) = (barrier.clone(), s.clone());
            thread::spawn(move || {
                let mut c = connect();
                // Session n starts at key n * 5 and goes round, backwards for odd n.
                let mut keys: Vec<String> = (0..KEYS)
                    .map(|i| format!("k{:02}", (i + n * 5) % KEYS))
                    .collect();
                if n % 2 == 1 {
                    keys.reverse();
                }
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                barrier.wait();
                let items = c
                    .query(
                        "SELECT key, outcome FROM idem_begin_batch($1, $2)",
                        &[&s, &keys],
                    )
                    .map_err(|e| format!("{} {e}", sqlstate(&e)))?;
                Ok::<_, String>(
                    items
                        .iter()
                        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                        .collect::<Vec<_>>(),
                )
            })
        })
        .collect();
    let mut claims = std::collections::BTreeMap::<String, usize>::new();
    for h in handles {
        let items = h
            .join()
            .expect("session thread panicked")
            .expect("a batch failed");
        assert_eq!(items.len(), KEYS);
        for (key, outcome) in items {
            assert!(
                outcome == "claimed" || outcome == "in_progress",
                "{key}: {outcome}"
            );
            if outcome == "claimed" {
                *claims.entry(key).or_default() += 1;
            }
        }
    }
    assert_eq!(claims.len(), KEYS, "every key was claimed");
    assert!(claims.values().all(|n| *n == 1), "{claims:?}");
}
