//! The life of one call: claim, a duplicate while it runs, completion, replay, completing
//! again, release, extend (tests/regress/sql/lifecycle.sql).

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;
use super::support::*;

const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);
const SLACK: Duration = Duration::from_secs(5);

/// A claim, a duplicate that learns the call runs (never the fence), the completion, its
/// replay, a completion repeated with the same fence, and the record at each step.
pub async fn claim_complete_replay(h: Harness) {
    let sc = h.scope("lifecycle");
    let request = json!({"to": "ann@example.com"});
    let fingerprint = pg_idempotency_canon::hash_value(&request).unwrap();
    let o = BeginOptions {
        request: Some(request),
        ..opts()
    };
    let c = claimed(h.begin(&sc, KEY, &o).await);
    assert_eq!((c.attempt, c.recovered), (1, false));
    // The defaults: a lease of a minute, a ttl of an hour, from the same instant.
    assert_in(c.lease_until, MINUTE, SLACK);
    assert_eq!(between(c.lease_until, c.expires_at), HOUR - MINUTE);

    let dup = running(h.begin(&sc, KEY, &o).await);
    assert_eq!((dup.attempt, dup.upstream_key), (1, c.upstream_key));
    assert!(dup.retry_after > Duration::ZERO && dup.retry_after <= MINUTE);

    let rec = h.lookup(&sc, KEY).await.unwrap().expect("a running record");
    assert_eq!(rec.state, State::InProgress);
    assert_eq!((rec.fence, rec.attempt), (c.fence, 1));
    assert_eq!(rec.fingerprint, Some(fingerprint));
    assert_eq!(rec.upstream_key, c.upstream_key);
    assert_eq!((rec.response, rec.completed_at), (None, None));
    assert_eq!(rec.lease_until, Some(c.lease_until));
    assert_eq!(rec.expires_at, c.expires_at);

    let done = h
        .complete(
            &sc,
            KEY,
            c.fence,
            Some(&json!({"message_id": 42})),
            true,
            None,
        )
        .await;
    assert_eq!(done.unwrap(), Completed::Succeeded);

    let r = replayed(h.begin(&sc, KEY, &o).await);
    assert!(r.succeeded);
    assert_eq!(r.response, Some(json!({"message_id": 42})));
    assert_eq!((r.attempt, r.upstream_key), (1, c.upstream_key));
    // Remembered for its ttl after the completion.
    assert_in(r.expires_at, HOUR, SLACK);
    assert!(r.expires_at >= c.expires_at);

    // The first reply may have been lost: the same fence again keeps the stored result.
    let again = h
        .complete(
            &sc,
            KEY,
            c.fence,
            Some(&json!({"message_id": 999})),
            true,
            None,
        )
        .await;
    assert_eq!(again.unwrap(), Completed::Succeeded);
    let rec = h.lookup(&sc, KEY).await.unwrap().expect("the result");
    assert_eq!(rec.state, State::Succeeded);
    assert_eq!((rec.fence, rec.attempt), (c.fence, 1));
    assert_eq!(rec.response, Some(json!({"message_id": 42})));
    assert_eq!(rec.fingerprint, Some(fingerprint));
    assert!(rec.completed_at.expect("completed_at") >= rec.created_at);
    assert_eq!(rec.lease_until, None);
    assert_eq!(rec.expires_at, r.expires_at);
}

/// The same key in another scope is another call.
pub async fn another_scope_is_another_call(h: Harness) {
    let (one, two) = (h.scope("send_email"), h.scope("send_sms"));
    let a = claimed(h.begin(&one, KEY, &opts()).await);
    let b = claimed(h.begin(&two, KEY, &opts()).await);
    assert_ne!(a.fence, b.fence);
    assert_ne!(a.upstream_key, b.upstream_key);
    assert_eq!(b.attempt, 1);
}

/// Release gives the claim up and leaves nothing: the next begin claims afresh.
pub async fn release_leaves_nothing(h: Harness) {
    let sc = h.scope("release");
    let c = claimed(h.begin(&sc, KEY, &opts()).await);
    h.release(&sc, KEY, c.fence).await.unwrap();
    assert_eq!(h.lookup(&sc, KEY).await.unwrap(), None);
    let next = claimed(h.begin(&sc, KEY, &opts()).await);
    assert_eq!((next.attempt, next.recovered), (1, false));
    assert!(next.fence > c.fence);
    assert_ne!(next.upstream_key, c.upstream_key);
}

/// Extend pushes the lease, never lets the record expire before it, and defaults to
/// min(default lease, the record's ttl).
pub async fn extend_pushes_the_lease(h: Harness) {
    let sc = h.scope("extend");
    let o = BeginOptions {
        ttl: Some(Duration::from_secs(10)),
        lease: Some(Duration::from_secs(2)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, KEY, &o).await);
    let until = h
        .extend(&sc, KEY, c.fence, Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_in(until, Duration::from_secs(5), Duration::from_secs(1));
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!(rec.lease_until, Some(until));
    assert_eq!(rec.expires_at, c.expires_at, "a lease within the expiry");
    // A lease as long as the ttl, given later, ends after the claim's expiry: pushed out.
    let until = h
        .extend(&sc, KEY, c.fence, Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert!(until >= c.expires_at);
    assert_eq!((rec.lease_until, rec.expires_at), (Some(until), until));
    assert_eq!(
        (rec.state, rec.fence, rec.attempt),
        (State::InProgress, c.fence, 1)
    );
    // No lease: the default, capped by the record's ttl (10 s here, not a minute) ...
    let until = h.extend(&sc, KEY, c.fence, None).await.unwrap();
    assert_in(until, Duration::from_secs(10), Duration::from_secs(1));
    // ... and a minute under a ttl of an hour.
    let long = h.scope("extend-default");
    let c = claimed(h.begin(&long, KEY, &opts()).await);
    let until = h.extend(&long, KEY, c.fence, None).await.unwrap();
    assert_in(until, MINUTE, Duration::from_secs(1));
    assert_eq!(
        h.lookup(&long, KEY).await.unwrap().unwrap().expires_at,
        c.expires_at
    );
}

/// The lease defaults to min(default lease, ttl) (leases.sql; policies.sql's capped policy
/// lease).
pub async fn default_lease_is_capped_by_the_ttl(h: Harness) {
    let sc = h.scope("lease-cap");
    let o = BeginOptions {
        ttl: Some(Duration::from_secs(5)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, KEY, &o).await);
    assert_eq!(c.lease_until, c.expires_at);
    assert_in(c.expires_at, Duration::from_secs(5), Duration::from_secs(1));
    // A lease equal to the ttl is allowed.
    let o = BeginOptions {
        ttl: Some(Duration::from_secs(30)),
        lease: Some(Duration::from_secs(30)),
        ..opts()
    };
    let c = claimed(h.begin(&sc, "equal", &o).await);
    assert_eq!(c.lease_until, c.expires_at);
}

/// A response comes back as it was given: none, JSON null, exact big integers, doubles,
/// text beyond ASCII, nesting.
pub async fn responses_come_back_as_given(h: Harness) {
    let sc = h.scope("responses");
    let given = [
        None,
        Some(json!(null)),
        Some(json!(9007199254740993u64)),
        Some(json!(0.1)),
        Some(json!("é ☃ 𝄞")),
        Some(json!({"b": [1, {"c": false}], "a": ""})),
    ];
    for (i, response) in given.iter().enumerate() {
        let key = format!("r{i}");
        let c = claimed(h.begin(&sc, &key, &opts()).await);
        h.complete(&sc, &key, c.fence, response.as_ref(), true, None)
            .await
            .unwrap();
        let r = replayed(h.begin(&sc, &key, &opts()).await);
        assert_eq!(&r.response, response, "replayed");
        let rec = h.lookup(&sc, &key).await.unwrap().unwrap();
        assert_eq!(&rec.response, response, "looked up");
    }
}
