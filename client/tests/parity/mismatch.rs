//! Mismatch: the same key with a different request (tests/regress/sql/failures.sql's
//! mismatch part and lifecycle.sql's "the same request, spelled differently").

use pg_idempotency_client::*;
use serde_json::{json, Value};

use super::harness::Harness;
use super::support::*;

fn with(request: Value) -> BeginOptions {
    BeginOptions {
        request: Some(request),
        ..opts()
    }
}

/// The SQL API's detail: both fingerprints.
pub fn mismatch_detail(first: &Value, this: &Value) -> String {
    format!(
        "The key was first used with a request of fingerprint \\x{}; this request's fingerprint is \\x{}.",
        pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(first).unwrap()),
        pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(this).unwrap())
    )
}

/// Rejected with both fingerprints in the detail and a hint, running or completed, and
/// nothing changed; `ignore` treats it as the same call; a begin without a request is
/// compared with nothing; the same request spelled differently is the same call.
pub async fn a_different_request_is_rejected_unless_ignored(h: Harness) {
    let sc = h.scope("mismatch");
    let (a, b) = (
        json!({"title": "Crash", "body": "a", "amount": 100}),
        json!({"title": "Crash", "body": "b", "amount": 100}),
    );
    let c = claimed(h.begin(&sc, KEY, &with(a.clone())).await);
    let before = h.lookup(&sc, KEY).await.unwrap();
    let e = refused(
        h.begin(&sc, KEY, &with(b.clone())).await,
        ErrorKind::Mismatch,
    );
    assert_eq!(e.message, "idempotency key reused with a different request");
    assert_eq!(e.detail(), Some(mismatch_detail(&a, &b).as_str()));
    assert!(e.hint().is_some_and(|h| !h.is_empty()), "{e:?}");
    assert_eq!(h.lookup(&sc, KEY).await.unwrap(), before);

    let ignore = BeginOptions {
        on_mismatch: Some(OnMismatch::Ignore),
        ..with(b.clone())
    };
    assert_eq!(
        running(h.begin(&sc, KEY, &ignore).await).upstream_key,
        c.upstream_key
    );
    running(h.begin(&sc, KEY, &opts()).await);
    // 100.0 and 100 are one number in canonical JSON.
    let respelled = json!({"amount": 100.0, "body": "a", "title": "Crash"});
    running(h.begin(&sc, KEY, &with(respelled)).await);

    h.complete(&sc, KEY, c.fence, Some(&json!(1)), true, None)
        .await
        .unwrap();
    let e = refused(
        h.begin(&sc, KEY, &with(b.clone())).await,
        ErrorKind::Mismatch,
    );
    assert_eq!(e.detail(), Some(mismatch_detail(&a, &b).as_str()));
    assert!(replayed(h.begin(&sc, KEY, &ignore).await).succeeded);
}

/// The stored fingerprint is the first request's, also when the call is claimed again under
/// `ignore`; a record claimed without a request takes the first request that comes.
pub async fn the_first_request_stays_the_fingerprint(h: Harness) {
    let sc = h.scope("fingerprint");
    let (a, b) = (json!({"amount": 1}), json!({"amount": 2}));
    let rerun = |request: Value| BeginOptions {
        on_cache_hit: Some(OnCacheHit::ReturnCachedIfSuccess),
        on_mismatch: Some(OnMismatch::Ignore),
        ..with(request)
    };
    let c = claimed(h.begin(&sc, KEY, &with(a.clone())).await);
    h.complete(&sc, KEY, c.fence, None, false, Some(true))
        .await
        .unwrap();
    let again = claimed(h.begin(&sc, KEY, &rerun(b.clone())).await);
    assert_eq!(again.attempt, 2);
    let rec = h.lookup(&sc, KEY).await.unwrap().unwrap();
    assert_eq!(
        rec.fingerprint,
        Some(pg_idempotency_canon::hash_value(&a).unwrap())
    );
    let e = refused(
        h.begin(&sc, KEY, &with(b.clone())).await,
        ErrorKind::Mismatch,
    );
    assert_eq!(e.detail(), Some(mismatch_detail(&a, &b).as_str()));

    let bare = h.scope("fingerprint-bare");
    let c = claimed(h.begin(&bare, KEY, &opts()).await);
    assert_eq!(
        h.lookup(&bare, KEY).await.unwrap().unwrap().fingerprint,
        None
    );
    h.complete(&bare, KEY, c.fence, None, false, Some(true))
        .await
        .unwrap();
    claimed(h.begin(&bare, KEY, &rerun(a.clone())).await);
    let rec = h.lookup(&bare, KEY).await.unwrap().unwrap();
    assert_eq!(
        rec.fingerprint,
        Some(pg_idempotency_canon::hash_value(&a).unwrap())
    );
    refused(h.begin(&bare, KEY, &with(b)).await, ErrorKind::Mismatch);
}
