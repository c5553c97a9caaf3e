//! Which methods carry `Idempotency-Key`, which key, and what a repeat of a remembered call
//! gets.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::{json, Value};

use super::provider::provider;
use super::stores::*;

/// POST, PUT, PATCH and DELETE: the call's key (or the record's upstream uuid under
/// `UpstreamKey::Record`), the input as the JSON body; repeats replay the first answer and
/// never reach the provider.
pub async fn unsafe_methods_carry_the_key(store: Store) {
    let p = provider().await;
    for method in unsafe_methods() {
        for which in [UpstreamKey::CallKey, UpstreamKey::Record] {
            let web = WebExecutor::new(store.clone());
            let name = unique_action("charge");
            let path = format!("/charges/{method}-{which:?}");
            web.register(
                Action::new(name.clone(), method.clone(), format!("{}{path}", p.base))
                    .upstream_key(which),
            )
            .unwrap();
            let input = json!({"amount": 100, "card": "c1"});
            let first = web.execute(&name, input.clone()).await.unwrap();
            let Dispatched::Ran(answer) = first else {
                panic!("{method} {which:?}: the first call did not run: {first:?}")
            };
            for _ in 0..2 {
                assert_eq!(
                    web.execute(&name, input.clone()).await.unwrap(),
                    Dispatched::Replayed(answer.clone()),
                    "{method} {which:?}"
                );
            }
            let seen = p.seen_at(&path);
            assert_eq!(seen.len(), 1, "{method} {which:?}: {seen:?}");
            assert_eq!(seen[0].method, method.as_str());
            assert_eq!(
                serde_json::from_str::<Value>(&seen[0].body).unwrap(),
                input,
                "{method}: the input travels as the body"
            );
            let record = store
                .lookup(&name, &hash_key(&input))
                .await
                .unwrap()
                .expect("the call's record");
            let expected = match which {
                UpstreamKey::CallKey => hash_key(&input),
                UpstreamKey::Record => record.upstream_key.to_string(),
            };
            assert_eq!(
                seen[0].key.as_deref(),
                Some(expected.as_str()),
                "{method} {which:?}"
            );
        }
    }
}

/// GET, HEAD and OPTIONS: no key, the input as the query; a deduplicated action (HashInput
/// with a ttl) answers a repeat from the store, and another input reaches the provider.
pub async fn safe_methods_carry_no_key_and_replay(store: Store) {
    let p = provider().await;
    for method in safe_methods() {
        let web = WebExecutor::new(store.clone());
        let name = unique_action("lookup");
        let path = format!("/customers/{method}");
        let idem = Idempotent::new().hash_input().ttl(Duration::from_secs(60));
        web.register(
            Action::new(name.clone(), method.clone(), format!("{}{path}", p.base))
                .params(Params::Query)
                .idempotent(idem),
        )
        .unwrap();
        let input = json!({"id": "42", "active": true});
        let Dispatched::Ran(answer) = web.execute(&name, input.clone()).await.unwrap() else {
            panic!("{method}: the first call did not run")
        };
        assert_eq!(
            web.execute(&name, input.clone()).await.unwrap(),
            Dispatched::Replayed(answer.clone()),
            "{method}"
        );
        assert_eq!(
            p.seen_at(&path).len(),
            1,
            "{method}: a repeat reached the provider"
        );
        assert!(matches!(
            web.execute(&name, json!({"id": "43"})).await.unwrap(),
            Dispatched::Ran(_)
        ));
        let seen = p.seen_at(&path);
        assert_eq!(seen.len(), 2, "{method}: {seen:?}");
        for s in &seen {
            assert_eq!(s.method, method.as_str());
            assert_eq!(s.key, None, "{method} carried a key");
            assert_eq!(s.body, "", "{method} carried a body");
        }
        assert_eq!(seen[0].path, format!("{path}?active=true&id=42"));
        assert_eq!(seen[1].path, format!("{path}?id=43"));
    }
}

/// An Explicit key supplier names the call once per call; under `UpstreamKey::CallKey` its
/// key goes upstream as is.
pub async fn the_key_supplier_is_called_once_per_call(store: Store) {
    let p = provider().await;
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let idem = Idempotent::new().key_supplier(move |v| {
        counter.fetch_add(1, Ordering::SeqCst);
        v["order"].as_str().map(str::to_string)
    });
    let web = WebExecutor::new(store);
    let name = unique_action("ship");
    web.register(
        Action::new(name.clone(), Method::POST, format!("{}/shipments", p.base))
            .idempotent(idem)
            .upstream_key(UpstreamKey::CallKey),
    )
    .unwrap();
    web.execute(&name, json!({"order": "o-1"})).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(p.seen()[0].key.as_deref(), Some("o-1"));
}

/// `KeyStrategy::Uuid`: a fresh key per call, nothing deduplicated here; such a side effect
/// must be declared best effort.
pub async fn uuid_keys_are_fresh_on_every_call(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store);
    let uuid = Idempotent::new().strategy(KeyStrategy::Uuid);
    let name = unique_action("ping");
    let endpoint = format!("{}/ping", p.base);
    let required =
        Action::new(name.clone(), Method::POST, endpoint.clone()).idempotent(uuid.clone());
    assert_eq!(
        web.register(required).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    web.register(
        Action::new(name.clone(), Method::POST, endpoint)
            .idempotent(uuid)
            .hint(IdempotencyHint::BestEffort),
    )
    .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            web.execute(&name, json!({"a": 1})).await.unwrap(),
            Dispatched::Ran(_)
        ));
    }
    let keys: Vec<String> = p.seen().iter().filter_map(|s| s.key.clone()).collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| uuid::Uuid::parse_str(k).is_ok()));
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);
}

/// An explicit key a header cannot carry as it is (a control character, or spaces at either
/// end that HTTP strips, so two calls would share one key upstream) is refused, not
/// retried, and nothing is sent; `UpstreamKey::Record` sends the record's uuid instead.
pub async fn a_key_no_header_can_carry_is_refused(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store);
    let idem = Idempotent::new().key_supplier(|v| v["order"].as_str().map(str::to_string));
    let name = unique_action("ship");
    let endpoint = format!("{}/shipments", p.base);
    web.register(
        Action::new(name.clone(), Method::POST, endpoint.clone())
            .idempotent(idem.clone())
            .upstream_key(UpstreamKey::CallKey),
    )
    .unwrap();
    for key in ["o-1\r\nX-Injected: 1", "o-1\u{7f}", " o-1", "o-1\t"] {
        let e = web.execute(&name, json!({"order": key})).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{key:?}: {e}");
        assert!(!e.retryable(), "{key:?}");
    }
    assert_eq!(p.seen().len(), 0, "a refused key reached the provider");
    let record = unique_action("ship");
    web.register(
        Action::new(record.clone(), Method::POST, endpoint)
            .idempotent(idem)
            .upstream_key(UpstreamKey::Record),
    )
    .unwrap();
    web.execute(&record, json!({"order": "o-1\n"}))
        .await
        .unwrap();
    let seen = p.seen();
    assert_eq!(seen.len(), 1);
    assert!(uuid::Uuid::parse_str(seen[0].key.as_deref().unwrap()).is_ok());
}
