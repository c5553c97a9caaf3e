//! Batches (0.6.0): `begin_batch` answers each item as `begin` would answer it alone, a
//! refusal being that item's `Err`; `complete_batch` completes each item under its fence, a
//! lost lease being that item's `Err`; an argument no store takes fails the whole batch and
//! changes nothing (tests/tests/behaviour/batch.rs holds the SQL API to the same).

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

fn items(keys: &[&str]) -> Vec<BatchBegin> {
    keys.iter().map(|k| BatchBegin::new(*k)).collect()
}

pub async fn each_item_is_answered_as_a_single_call(h: Harness) {
    let sc = h.scope("batch");
    let done = claimed(h.begin(&sc, "done", &opts()).await);
    h.complete(
        &sc,
        "done",
        done.fence,
        Some(&json!({"sent": 1})),
        true,
        None,
    )
    .await
    .unwrap();
    let running_claim = claimed(h.begin(&sc, "running", &opts()).await);
    let with = |r: serde_json::Value| BeginOptions {
        request: Some(r),
        ..opts()
    };
    claimed(h.begin(&sc, "other", &with(json!({"to": "ann"}))).await);

    let batch = vec![
        BatchBegin::new("new"),
        BatchBegin::new("done"),
        BatchBegin::new("running"),
        BatchBegin::new("other").request(json!({"to": "bob"})),
        BatchBegin::new("new"),
    ];
    let mut answers = h
        .begin_batch(&sc, &batch, &BatchOptions::default())
        .await
        .unwrap()
        .into_iter();
    let new = claimed(answers.next().unwrap());
    assert_eq!(
        replayed(answers.next().unwrap()).response,
        Some(json!({"sent": 1}))
    );
    let p = running(answers.next().unwrap());
    assert_eq!(p.upstream_key, running_claim.upstream_key);
    refused(answers.next().unwrap(), ErrorKind::Mismatch);
    // The same key again: the first item holds it now.
    assert_eq!(
        running(answers.next().unwrap()).upstream_key,
        new.upstream_key
    );
    assert!(answers.next().is_none(), "one answer per item");

    // fail_fast: a repeat of a completed call is that item's refusal.
    let fail_fast = BatchOptions {
        on_cache_hit: Some(OnCacheHit::FailFast),
        ..BatchOptions::default()
    };
    let answers = h
        .begin_batch(&sc, &items(&["done", "fresh"]), &fail_fast)
        .await
        .unwrap();
    let mut answers = answers.into_iter();
    refused(answers.next().unwrap(), ErrorKind::RepeatRefused);
    claimed(answers.next().unwrap());
    assert!(h
        .begin_batch(&sc, &[], &BatchOptions::default())
        .await
        .unwrap()
        .is_empty());

    // A repeat of a batch whose answer was lost, with its claim tokens: its claims back.
    let tokens: Vec<BatchBegin> = ["t1", "t2"]
        .iter()
        .map(|k| BatchBegin::new(*k).claim_token(uuid::Uuid::new_v4()))
        .collect();
    let first = h
        .begin_batch(&sc, &tokens, &BatchOptions::default())
        .await
        .unwrap();
    let again = h
        .begin_batch(&sc, &tokens, &BatchOptions::default())
        .await
        .unwrap();
    let fences =
        |a: Vec<BatchBegun>| -> Vec<i64> { a.into_iter().map(|b| claimed(b).fence).collect() };
    assert_eq!(fences(again), fences(first));
}

pub async fn each_item_is_completed_under_its_fence(h: Harness) {
    let sc = h.scope("batch-complete");
    let claims: Vec<Claim> = h
        .begin_batch(&sc, &items(&["a", "b", "c", "d"]), &BatchOptions::default())
        .await
        .unwrap()
        .into_iter()
        .map(claimed)
        .collect();
    let done = h
        .complete_batch(
            &sc,
            &[
                BatchComplete::succeeded("a", claims[0].fence, json!({"n": 1})),
                BatchComplete::succeeded("b", claims[1].fence + 1_000_000, json!({"n": 2})),
                BatchComplete::failed("c", claims[2].fence, json!({"n": 3}), Some(true)),
                BatchComplete::failed("d", claims[3].fence, json!({"n": 4}), Some(false)),
            ],
        )
        .await
        .unwrap();
    let mut done = done.into_iter();
    assert_eq!(done.next().unwrap().unwrap(), Completed::Succeeded);
    refused(done.next().unwrap(), ErrorKind::LeaseLost);
    assert_eq!(done.next().unwrap().unwrap(), Completed::Failed);
    assert_eq!(done.next().unwrap().unwrap(), Completed::Absent);
    assert!(done.next().is_none(), "one answer per item");

    assert_eq!(
        h.lookup(&sc, "a").await.unwrap().unwrap().response,
        Some(json!({"n": 1}))
    );
    assert_eq!(
        h.lookup(&sc, "b").await.unwrap().unwrap().state,
        State::InProgress,
        "b still runs under its own fence"
    );
    assert_eq!(
        h.lookup(&sc, "c").await.unwrap().unwrap().state,
        State::Failed
    );
    assert!(
        h.lookup(&sc, "d").await.unwrap().is_none(),
        "an uncached failure leaves nothing"
    );
    // Completing again with the fence that completed keeps the result.
    let again = h
        .complete_batch(
            &sc,
            &[BatchComplete::succeeded("a", claims[0].fence, json!({}))],
        )
        .await
        .unwrap();
    assert_eq!(again[0].as_ref().unwrap(), &Completed::Succeeded);
    assert_eq!(
        replayed(h.begin(&sc, "a", &opts()).await).response,
        Some(json!({"n": 1}))
    );
}

pub async fn a_bad_item_fails_the_batch_and_changes_nothing(h: Harness) {
    let sc = h.scope("batch-refused");
    let e = h
        .begin_batch(&sc, &items(&["a", " "]), &BatchOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e:?}");
    let atomic = h.batches_are_atomic();
    if atomic {
        assert!(
            h.lookup(&sc, "a").await.unwrap().is_none(),
            "item 1 was not claimed"
        );
    }

    let many: Vec<String> = (0..=MAX_BATCH_ITEMS).map(|i| format!("k{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let e = h
        .begin_batch(&sc, &items(&many), &BatchOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::InvalidArgument, "too many items in one batch")
    );
    assert!(h.lookup(&sc, "k0").await.unwrap().is_none());

    // A response over the limit in item 2: item 1 stays held, not completed.
    let claims: Vec<Claim> = h
        .begin_batch(&sc, &items(&["c", "d"]), &BatchOptions::default())
        .await
        .unwrap()
        .into_iter()
        .map(claimed)
        .collect();
    let huge = json!({"x": "y".repeat(3 * 1024 * 1024)});
    let e = h
        .complete_batch(
            &sc,
            &[
                BatchComplete::succeeded("c", claims[0].fence, json!({})),
                BatchComplete::succeeded("d", claims[1].fence, huge),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::ResponseTooLarge, "{e:?}");
    if atomic {
        assert_eq!(
            h.lookup(&sc, "c").await.unwrap().unwrap().state,
            State::InProgress,
            "item 1 was not completed"
        );
    }
}

/// A batch right after Redis forgot its scripts (a restart, SCRIPT FLUSH): the store loads
/// them and sends the batch again, nothing claimed twice. The other stores have nothing to
/// forget and answer as always.
pub async fn a_batch_after_the_scripts_were_forgotten(h: Harness) {
    let sc = h.scope("batch-noscript");
    h.forget_loaded_scripts().await;
    let first = h
        .begin_batch(&sc, &items(&["a", "b"]), &BatchOptions::default())
        .await
        .unwrap();
    let claims: Vec<Claim> = first.into_iter().map(claimed).collect();
    h.forget_loaded_scripts().await;
    let done = h
        .complete_batch(
            &sc,
            &[
                BatchComplete::succeeded("a", claims[0].fence, json!(1)),
                BatchComplete::succeeded("b", claims[1].fence, json!(2)),
            ],
        )
        .await
        .unwrap();
    assert!(
        done.iter().all(|d| matches!(d, Ok(Completed::Succeeded))),
        "{done:?}"
    );
    let again = h
        .begin_batch(&sc, &items(&["a", "b"]), &BatchOptions::default())
        .await
        .unwrap();
    let responses: Vec<_> = again.into_iter().map(|b| replayed(b).response).collect();
    assert_eq!(responses, [Some(json!(1)), Some(json!(2))]);
}
