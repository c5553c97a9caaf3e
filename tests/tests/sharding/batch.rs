//! Batches through the proxy: every partition gets its items in one call, the answers come
//! back in the batch's order, and each record lives on the partition its key hashes to.

use pg_idempotency_tests::sharded::Sharded;
use pg_idempotency_tests::*;

#[test]
fn a_batch_reaches_each_keys_partition_and_answers_in_the_order_given() {
    let Some(s) = Sharded::new("batch", 4) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("batch");
    // Keys until every partition has three of them (the scope differs each run, and with
    // it where a key lands).
    let mut keys: Vec<String> = Vec::new();
    let mut per_partition = [0usize; 4];
    while per_partition.iter().any(|n| *n < 3) {
        let key = format!("k{}", keys.len());
        per_partition[s.partition_of(&scope, &key)] += 1;
        keys.push(key);
    }

    // k3 is running already; k5 completed.
    assert_eq!(begin(&mut c, &scope, "k3").outcome, "claimed");
    let done = begin(&mut c, &scope, "k5");
    complete(&mut c, &scope, "k5", done.fence.unwrap(), r#"{"sent": 5}"#).unwrap();

    let rows = c
        .query(
            "SELECT item, key, outcome, fence, response::text FROM idem_begin_batch($1, $2)",
            &[&scope, &keys],
        )
        .unwrap();
    assert_eq!(rows.len(), keys.len());
    let mut claims = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let (item, key, outcome): (i32, String, String) = (r.get(0), r.get(1), r.get(2));
        assert_eq!((item as usize, key.as_str()), (i + 1, keys[i].as_str()));
        let expected = match key.as_str() {
            "k3" => "in_progress",
            "k5" => "replay",
            _ => "claimed",
        };
        assert_eq!(outcome, expected, "{key}");
        if key == "k5" {
            assert_eq!(
                r.get::<_, Option<String>>(4).as_deref(),
                Some(r#"{"sent": 5}"#)
            );
        }
        if outcome == "claimed" {
            claims.push((key.clone(), r.get::<_, i64>(3)));
        }
        assert_eq!(
            s.holders(&scope, &key),
            vec![s.partition_of(&scope, &key)],
            "{key}"
        );
    }

    // Complete them all, one with a fence it never had.
    let (ck, mut fences): (Vec<String>, Vec<i64>) = claims.into_iter().unzip();
    fences[0] += 1 << 40;
    let responses: Vec<String> = ck.iter().map(|k| format!(r#"{{"k": "{k}"}}"#)).collect();
    let done = c
        .query(
            "SELECT item, key, outcome, state FROM idem_complete_batch($1, $2, $3, $4::text[]::jsonb[])",
            &[&scope, &ck, &fences, &responses],
        )
        .unwrap();
    assert_eq!(done.len(), ck.len());
    for (i, r) in done.iter().enumerate() {
        let (item, key, outcome, state): (i32, String, String, Option<String>) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        assert_eq!((item as usize, key.as_str()), (i + 1, ck[i].as_str()));
        if i == 0 {
            assert_eq!((outcome.as_str(), state), ("lease_lost", None));
        } else {
            assert_eq!(
                (outcome.as_str(), state.as_deref()),
                ("completed", Some("succeeded"))
            );
        }
    }
}

#[test]
fn a_derived_key_in_a_batch_meets_the_same_call_made_alone() {
    let Some(s) = Sharded::new("batchhash", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("batchhash");
    let requests = vec![
        r#"{"to": "ann", "n": 1.0}"#.to_string(),
        r#"{"to": "bob"}"#.to_string(),
    ];
    let keys: Vec<Option<String>> = vec![None, None];
    let rows = c
        .query(
            "SELECT key, outcome FROM idem_begin_batch($1, $2, $3::text[]::jsonb[])",
            &[&scope, &keys, &requests],
        )
        .unwrap();
    for (r, request) in rows.iter().zip(&requests) {
        let (key, outcome): (String, String) = (r.get(0), r.get(1));
        assert_eq!(outcome, "claimed");
        assert_eq!(s.holders(&scope, &key), vec![s.partition_of(&scope, &key)]);
        let alone: String = c
            .query_one(
                "SELECT outcome FROM idem_begin($1, NULL, $2::text::jsonb)",
                &[&scope, request],
            )
            .unwrap()
            .get(0);
        assert_eq!(alone, "in_progress", "{key}");
    }
}

#[test]
fn the_arrays_shape_is_refused_on_the_proxy_before_any_partition_is_asked() {
    let Some(s) = Sharded::new("batchshape", 2) else {
        return;
    };
    let mut c = s.connect();
    let scope = scope("batchshape");
    let err = c
        .query(
            "SELECT * FROM idem_begin_batch($1, ARRAY['a', 'b'], ARRAY['{}']::jsonb[])",
            &[&scope],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    assert_eq!(
        err.as_db_error().unwrap().message(),
        "the arrays of a batch must have one length"
    );
    for p in 0..2 {
        let n: i64 = s
            .partition(p)
            .query_one("SELECT count(*) FROM idempotency.records", &[])
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "partition {p}");
    }
}
