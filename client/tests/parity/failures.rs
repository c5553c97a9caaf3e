//! Failures, cached or not, and what a repeat gets under each `on_cache_hit`
//! (tests/regress/sql/failures.sql; policies.sql's `cache_failure` given by the call).

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

/// An uncached failure (the default, or `cache_failure` false) leaves nothing behind: a
/// retry runs the call again, as a first attempt.
pub async fn an_uncached_failure_leaves_nothing(h: Harness) {
    let sc = h.scope("uncached");
    for cache_failure in [None, Some(false)] {
        let c = claimed(h.begin(&sc, KEY, &opts()).await);
        assert_eq!((c.attempt, c.recovered), (1, false));
        let done = h
            .complete(
                &sc,
                KEY,
                c.fence,
                Some(&json!({"error": "timeout"})),
                false,
                cache_failure,
            )
            .await;
        assert_eq!(
            done.unwrap(),
            Completed::Absent,
            "cache_failure {cache_failure:?}"
        );
        assert_eq!(h.lookup(&sc, KEY).await.unwrap(), None);
        // Nothing is held any more: the fence is refused like any other.
        refused(h.release(&sc, KEY, c.fence).await, ErrorKind::LeaseLost);
    }
    // cache_failure says nothing about a success.
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let done = h.complete(&sc, KEY, c.fence, None, true, Some(false)).await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
}

/// A cached failure is replayed by default and under `return_cached`.
pub async fn a_cached_failure_is_replayed(h: Harness) {
    let sc = h.scope("cached");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    let declined = json!({"error": "card declined"});
    let done = h
        .complete(&sc, KEY, c.fence, Some(&declined), false, Some(true))
        .await;
    assert_eq!(done.unwrap(), Completed::Failed);
    for hit in [None, Some(OnCacheHit::ReturnCached)] {
        let o = BeginOptions {
            on_cache_hit: hit,
            ..opts()
        };
        let r = replayed(h.begin(&sc, KEY, &o).await);
        assert!(!r.succeeded, "{hit:?}");
        assert_eq!(r.response, Some(declined.clone()));
        assert_eq!((r.attempt, r.upstream_key), (1, c.upstream_key));
    }
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!((rec.state, rec.fence), (State::Failed, c.fence));
    assert_eq!(rec.response, Some(declined));
    assert_eq!(rec.lease_until, None);
    // Completing it again with its fence keeps the failure.
    let again = h.complete(&sc, KEY, c.fence, None, true, None).await;
    assert_eq!(again.unwrap(), Completed::Failed);
}

/// `return_cached_if_success` claims a remembered failure again (the same call: attempt 2,
/// the same upstream key, not a takeover) and replays a remembered success.
pub async fn return_cached_if_success_reruns_a_failure(h: Harness) {
    let sc = h.scope("rerun");
    let rerun = BeginOptions {
        on_cache_hit: Some(OnCacheHit::ReturnCachedIfSuccess),
        ..opts()
    };
    let first = claimed(h.begin(&sc, KEY, &rerun).await);
    h.complete(
        &sc,
        KEY,
        first.fence,
        Some(&json!("declined")),
        false,
        Some(true),
    )
    .await
    .unwrap();
    let second = claimed(h.begin(&sc, KEY, &rerun).await);
    assert_eq!((second.attempt, second.recovered), (2, false));
    assert_eq!(second.upstream_key, first.upstream_key);
    assert!(second.fence > first.fence);
    // The failure's fence no longer holds the call.
    refused(
        h.complete(&sc, KEY, first.fence, None, true, None).await,
        ErrorKind::LeaseLost,
    );
    let done = h
        .complete(
            &sc,
            KEY,
            second.fence,
            Some(&json!({"charge": "ch_1"})),
            true,
            None,
        )
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);
    let r = replayed(h.begin(&sc, KEY, &rerun).await);
    assert!(r.succeeded);
    assert_eq!(r.response, Some(json!({"charge": "ch_1"})));
    assert_eq!((r.attempt, r.upstream_key), (2, first.upstream_key));
}

/// `fail_fast` refuses a repeat of a completed call, success or cached failure, and
/// changes nothing; a call still running is in progress, as always.
pub async fn fail_fast_refuses_a_completed_call(h: Harness) {
    let sc = h.scope("fail-fast");
    let ff = BeginOptions {
        on_cache_hit: Some(OnCacheHit::FailFast),
        ..opts()
    };
    for (key, succeeded) in [("ok", true), ("failed", false)] {
        let c = claimed(h.begin(&sc, key, &opts()).await);
        h.complete(&sc, key, c.fence, Some(&json!(1)), succeeded, Some(true))
            .await
            .unwrap();
        let before = h.lookup(&sc, key).await.unwrap();
        refused(h.begin(&sc, key, &ff).await, ErrorKind::RepeatRefused);
        assert_eq!(h.lookup(&sc, key).await.unwrap(), before);
    }
    let c = claimed(h.begin(&sc, "running", &opts()).await);
    let p = running(h.begin(&sc, "running", &ff).await);
    assert_eq!((p.attempt, p.upstream_key), (1, c.upstream_key));
}
