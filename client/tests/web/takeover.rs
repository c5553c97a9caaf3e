//! A call whose first attempt hung: the provider took the request and never answered, the
//! action's timeout fired, the claim stayed held until its lease lapsed, and a later
//! execute took it over. The provider must see the same `Idempotency-Key` both times.

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::json;
use tokio::task::JoinSet;

use super::provider::{provider, Provider};
use super::stores::*;

/// Every unsafe method, under the call's key and under the record's, at once (each case
/// waits out a lease of its own).
pub async fn a_takeover_sends_the_same_key(store: Store) {
    let p = std::sync::Arc::new(provider().await);
    let mut cases = JoinSet::new();
    for method in unsafe_methods() {
        for which in [UpstreamKey::CallKey, UpstreamKey::Record] {
            cases.spawn(one_takeover(
                store.clone(),
                p.clone(),
                method.clone(),
                which,
            ));
        }
    }
    while let Some(done) = cases.join_next().await {
        done.unwrap();
    }
}

async fn one_takeover(
    store: Store,
    p: std::sync::Arc<Provider>,
    method: Method,
    which: UpstreamKey,
) {
    let case = format!("{method} {which:?}");
    let web = WebExecutor::new(store.clone());
    let name = unique_action("send");
    let path = format!("/slow/{method}-{which:?}");
    // The first attempt's timeout must outlast its claim and request on a loaded machine
    // (the test waits for the provider to hold it); the lease outlasts the timeout.
    let idem = Idempotent {
        timeout: Some(Duration::from_secs(1)),
        lease: Some(Duration::from_millis(1500)),
        ..Idempotent::default()
    };
    web.register(
        Action::new(name.clone(), method, format!("{}{path}", p.base))
            .idempotent(idem)
            .upstream_key(which),
    )
    .unwrap();
    let input = json!({"to": "ann@example.com"});
    let key = hash_key(&input);
    let e = web.execute(&name, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{case}: {e}");
    p.wait_for(&path, 1).await;
    let first = store.lookup(&name, &key).await.unwrap().expect("the claim");
    assert_eq!(first.state, State::InProgress, "{case}");
    assert_eq!(first.attempt, 1, "{case}");
    // Retries are told the call is in progress, and for how long, until its lease lapses;
    // then one takes the claim over.
    let retry = Retry {
        attempts: 20,
        base: Duration::from_millis(50),
        max: Duration::from_secs(1),
        ..Retry::default()
    };
    // The takeover's attempts are patient: one cut while it records its answer would answer
    // Unrecorded, not a retry.
    let patient = Idempotent::new().timeout(Duration::from_secs(20));
    let taken_over = retry
        .run(|| async {
            Ok(web
                .execute_with(&name, input.clone(), &patient)
                .await?
                .attempt())
        })
        .await
        .unwrap();
    assert!(
        matches!(taken_over, Dispatched::Ran(_)),
        "{case}: {taken_over:?}"
    );
    let after = store
        .lookup(&name, &key)
        .await
        .unwrap()
        .expect("the record");
    assert_eq!(after.state, State::Succeeded, "{case}");
    assert_eq!(after.attempt, 2, "{case}: not a takeover");
    assert_eq!(after.upstream_key, first.upstream_key, "{case}");
    let seen = p.seen_at(&path);
    assert_eq!(seen.len(), 2, "{case}: {seen:?}");
    let expected = match which {
        UpstreamKey::CallKey => key,
        UpstreamKey::Record => first.upstream_key.to_string(),
    };
    for s in &seen {
        assert_eq!(s.key.as_deref(), Some(expected.as_str()), "{case}");
    }
}
