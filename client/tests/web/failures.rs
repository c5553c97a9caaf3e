//! A provider's error answers: a 5xx (or 409, 429) may pass and is retried under the same
//! key, after the provider's `Retry-After` if it gave one; a 4xx is remembered only where
//! `cache_failures` says so, and replays as the Http error it was.

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::json;

use super::provider::provider;
use super::stores::*;

fn retry() -> Retry {
    Retry {
        attempts: 5,
        base: Duration::from_millis(10),
        max: Duration::from_millis(50),
        ..Retry::default()
    }
}

fn all_methods() -> Vec<Method> {
    unsafe_methods().into_iter().chain(safe_methods()).collect()
}

fn params_for(method: &Method) -> Params {
    if safe_methods().contains(method) {
        Params::Query
    } else {
        Params::Body
    }
}

/// The key the provider must see on every request of the call: the call's key on unsafe
/// methods, none on safe ones.
fn expected_key(method: &Method, key: &str) -> Option<String> {
    unsafe_methods().contains(method).then(|| key.to_string())
}

/// A 503 is not remembered (by default failures are not cached): the next attempt reaches
/// the provider with the same key; `Retry` repeats it until the provider answers. So are a
/// 429 and, on a request that carried a key, a 409 (the provider still runs that key).
pub async fn a_5xx_is_retried_under_the_same_key(store: Store) {
    for status in [503, 409, 429] {
        let p = provider().await;
        for method in all_methods() {
            let case = format!("{method} {status}");
            let web = WebExecutor::new(store.clone());
            let name = unique_action("charge");
            let path = format!("/flaky/{status}/2/{method}");
            // The bare call key: an uncached failure releases the record, and with it the
            // record's uuid (a_5xx_keeps_the_record_key_when_failures_are_rerun).
            web.register(
                Action::new(name.clone(), method.clone(), format!("{}{path}", p.base))
                    .params(params_for(&method))
                    .upstream_key(UpstreamKey::CallKey),
            )
            .unwrap();
            let input = json!({"amount": 7});
            let key = hash_key(&input);
            let e = web.execute(&name, input.clone()).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::Http, "{case}: {e}");
            if status == 409 && safe_methods().contains(&method) {
                // A conflict means "your key is still running" only to a request that
                // carried one.
                assert!(!e.retryable(), "{case}: {e}");
                continue;
            }
            assert!(e.retryable(), "{case}: {e}");
            assert_eq!(e.response().unwrap()["status"], status, "{case}");
            assert!(
                store.lookup(&name, &key).await.unwrap().is_none(),
                "{case}: an uncached failure left a record"
            );
            let done = retry()
                .run(|| async { Ok(Attempt::Done(web.execute(&name, input.clone()).await?)) })
                .await
                .unwrap();
            let seen = p.seen_at(&path);
            assert_eq!(seen.len(), 3, "{case}: {seen:?}");
            // The provider's answer to the last request (a HEAD answer has no body).
            let answer = if method == Method::HEAD {
                json!("")
            } else {
                json!({"n": p.seen().len()})
            };
            assert_eq!(done, Dispatched::Ran(answer), "{case}");
            for s in &seen {
                assert_eq!(s.key, expected_key(&method, &key), "{case}");
            }
        }
    }
}

/// Under `UpstreamKey::Record`, an uncached failure leaves no record, so the next attempt
/// would mint a new uuid; remembering failures and re-running them
/// (`cache_failures: Some(true)`, `ReturnCachedIfSuccess`) keeps the record, and its uuid,
/// across a 5xx.
pub async fn a_5xx_keeps_the_record_key_when_failures_are_rerun(store: Store) {
    let p = provider().await;
    for method in unsafe_methods() {
        let web = WebExecutor::new(store.clone());
        let name = unique_action("charge");
        let path = format!("/flaky/503/2/{method}");
        let idem = Idempotent {
            cache_failures: Some(true),
            on_cache_hit: Some(OnCacheHit::ReturnCachedIfSuccess),
            ..Idempotent::default()
        };
        web.register(
            Action::new(name.clone(), method.clone(), format!("{}{path}", p.base))
                .idempotent(idem)
                .upstream_key(UpstreamKey::Record),
        )
        .unwrap();
        let input = json!({"amount": 7});
        let done = retry()
            .run(|| async { Ok(Attempt::Done(web.execute(&name, input.clone()).await?)) })
            .await
            .unwrap();
        assert!(matches!(done, Dispatched::Ran(_)), "{method}");
        let record = store
            .lookup(&name, &hash_key(&input))
            .await
            .unwrap()
            .expect("the record");
        assert_eq!(record.attempt, 3, "{method}");
        let seen = p.seen_at(&path);
        assert_eq!(seen.len(), 3, "{method}: {seen:?}");
        for s in &seen {
            assert_eq!(
                s.key.as_deref(),
                Some(record.upstream_key.to_string().as_str()),
                "{method}"
            );
        }
    }
}

/// A 422 is not worth retrying; `cache_failures: Some(true)` remembers it and replays it
/// without calling the provider; None (no policy for the scope: not cached) and
/// Some(false) remember nothing, so the next attempt calls again, with the same key.
pub async fn a_4xx_follows_cache_failures(store: Store) {
    let p = provider().await;
    for method in all_methods() {
        for cache in [Some(true), Some(false), None] {
            let case = format!("{method} cache_failures {cache:?}");
            let web = WebExecutor::new(store.clone());
            let name = unique_action("order");
            let path = format!("/status/422/{method}-{cache:?}");
            let idem = Idempotent {
                cache_failures: cache,
                ..Idempotent::default()
            };
            web.register(
                Action::new(name.clone(), method.clone(), format!("{}{path}", p.base))
                    .params(params_for(&method))
                    .idempotent(idem)
                    .upstream_key(UpstreamKey::CallKey),
            )
            .unwrap();
            let input = json!({"sku": "x-1", "quantity": 0});
            let key = hash_key(&input);
            let first = web.execute(&name, input.clone()).await.unwrap_err();
            assert_eq!(first.kind, ErrorKind::Http, "{case}: {first}");
            assert!(!first.retryable(), "{case}");
            assert!(!first.replayed(), "{case}");
            assert_eq!(first.response().unwrap()["status"], 422, "{case}");
            let record = store.lookup(&name, &key).await.unwrap();
            let second = web.execute(&name, input.clone()).await.unwrap_err();
            let seen = p.seen_at(&path);
            if cache == Some(true) {
                assert_eq!(record.map(|r| r.state), Some(State::Failed), "{case}");
                // Replayed as what it was: the provider's answer, status and body.
                assert_eq!(second.kind, ErrorKind::Http, "{case}: {second}");
                assert!(second.replayed(), "{case}");
                assert!(!second.retryable(), "{case}");
                assert_eq!(second.response(), first.response(), "{case}");
                assert_eq!(seen.len(), 1, "{case}: the provider was called again");
            } else {
                assert!(record.is_none(), "{case}: the failure was remembered");
                assert_eq!(second.kind, ErrorKind::Http, "{case}: {second}");
                assert!(!second.replayed(), "{case}");
                assert_eq!(seen.len(), 2, "{case}: {seen:?}");
            }
            for s in &seen {
                assert_eq!(s.key, expected_key(&method, &key), "{case}");
            }
        }
    }
}

/// A provider that cannot be reached: an Http error worth retrying, not remembered.
pub async fn an_unreachable_provider_is_retried(store: Store) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = format!("http://{}/charges", listener.local_addr().unwrap());
    drop(listener);
    let web = WebExecutor::new(store.clone());
    let name = unique_action("charge");
    web.register(Action::new(name.clone(), Method::POST, gone))
        .unwrap();
    let input = json!({"amount": 1});
    let e = web.execute(&name, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Http);
    assert!(e.retryable());
    assert!(store
        .lookup(&name, &hash_key(&input))
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        web.execute(&name, input).await.unwrap_err().kind,
        ErrorKind::Http
    );
}

/// A provider's `Retry-After` on an answer worth retrying reaches the caller (seconds or an
/// HTTP date), and `Retry` waits that long, up to its `max`, before trying again under
/// the same key. On an answer not worth retrying it is no advice.
pub async fn a_retry_after_is_the_providers_word(store: Store) {
    let p = provider().await;
    for form in ["after", "after-date"] {
        for status in [503, 429, 422] {
            let case = format!("{form} {status}");
            let web = WebExecutor::new(store.clone());
            let name = unique_action("charge");
            let path = format!("/{form}/30/{status}/1/x");
            web.register(
                Action::new(name.clone(), Method::POST, format!("{}{path}", p.base))
                    .upstream_key(UpstreamKey::CallKey),
            )
            .unwrap();
            let input = json!({"amount": 3});
            let e = web.execute(&name, input.clone()).await.unwrap_err();
            assert_eq!(e.response().unwrap()["status"], status, "{case}");
            let advice = e.retry_after();
            if status == 422 {
                assert!(!e.retryable(), "{case}");
                assert_eq!(advice, None, "{case}");
                continue;
            }
            let advice = advice.unwrap_or_else(|| panic!("{case}: no retry_after"));
            if form == "after" {
                assert_eq!(advice, Duration::from_secs(30), "{case}");
            } else {
                // An HTTP date has whole seconds, and was written a moment ago.
                assert!(
                    advice > Duration::from_secs(25) && advice <= Duration::from_secs(30),
                    "{case}: {advice:?}"
                );
            }
            // Believed up to `max` (50 ms here): the retry comes, under the same key.
            let done = retry()
                .run(|| async { Ok(Attempt::Done(web.execute(&name, input.clone()).await?)) })
                .await
                .unwrap();
            assert!(matches!(done, Dispatched::Ran(_)), "{case}");
            let seen = p.seen_at(&path);
            assert_eq!(seen.len(), 2, "{case}: {seen:?}");
            assert_eq!(seen[0].key, seen[1].key, "{case}");
        }
    }
}

/// An input that travels as query parameters must be an object (or null): anything else
/// is refused before the store or the provider hear of it. A body takes any JSON.
pub async fn a_query_input_must_be_an_object(store: Store) {
    let p = provider().await;
    let cases = [
        (Method::GET, Params::Query, json!(["a", "b"])),
        (Method::DELETE, Params::Query, json!("order-1")),
        (Method::GET, Params::Body, json!(7)),
        (Method::OPTIONS, Params::Query, json!(true)),
    ];
    for (method, params, input) in cases {
        let case = format!("{method} {params:?} {input}");
        let web = WebExecutor::new(store.clone());
        let name = unique_action("lookup");
        let path = format!("/refused/{method}");
        web.register(
            Action::new(name.clone(), method.clone(), format!("{}{path}", p.base)).params(params),
        )
        .unwrap();
        let e = web.execute(&name, input.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{case}: {e}");
        assert!(e.detail().is_some() && e.hint().is_some(), "{case}");
        assert!(!e.retryable(), "{case}");
        assert!(
            store
                .lookup(&name, &hash_key(&input))
                .await
                .unwrap()
                .is_none(),
            "{case}: a record was claimed"
        );
        assert!(
            p.seen_at(&path).is_empty(),
            "{case}: the provider was called"
        );
    }
    // Null is no parameters; a body carries an array as it is.
    for (method, params, input) in [
        (Method::GET, Params::Query, json!(null)),
        (Method::POST, Params::Body, json!(["a", "b"])),
    ] {
        let web = WebExecutor::new(store.clone());
        let name = unique_action("lookup");
        let path = format!("/accepted/{method}");
        web.register(
            Action::new(name.clone(), method.clone(), format!("{}{path}", p.base)).params(params),
        )
        .unwrap();
        web.execute(&name, input.clone()).await.unwrap();
        let seen = p.seen_at(&path);
        assert_eq!(seen.len(), 1, "{method}");
        if method == Method::POST {
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&seen[0].body).unwrap(),
                input
            );
        } else {
            assert_eq!(seen[0].path, path, "no query string");
        }
    }
}
