//! The client's own `WebExecutor` against a service behind the layer: its retries, a
//! takeover after its first attempt timed out while the handler still ran, and two
//! executors sending the same call at once give one execution; the layer's `Retry-After`
//! reaches the caller.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use pg_idempotency_client::{
    Action, Dispatched, ErrorKind, Idempotent, MemoryStore, Method, Retry, UpstreamKey, WebExecutor,
};
use pg_idempotency_server::{IdempotencyLayer, Rule, Scope};
use serde_json::json;

use crate::common::*;

/// The service: `/charges`, required, one principal; every request's key is logged.
async fn service(gate: Gate, wait: Duration) -> (String, Arc<Mutex<Vec<String>>>) {
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = keys.clone();
    let principal = unique("executor");
    let idem = IdempotencyLayer::new(store_on(pool()), move |_: &http::request::Parts| {
        Some(Scope::new(principal.clone(), "/charges"))
    })
    .rule("/charges", Rule::required())
    .wait(wait);
    let app = Router::new()
        .route(
            "/charges",
            post(move || {
                let gate = gate.clone();
                async move {
                    gate.pass().await;
                    axum::Json(json!({"charge": gate.done()}))
                }
            }),
        )
        .route_layer(idem)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let key = req
                    .headers()
                    .get("idempotency-key")
                    .map(|v| v.to_str().unwrap().to_string());
                seen.lock().unwrap().push(key.unwrap_or_default());
                next.run(req)
            },
        ));
    (serve(app).await, keys)
}

/// A process of its own: an executor over a store nobody else shares, so that only the
/// service can deduplicate what it sends. Such processes share no record, so they send
/// the bare call key (`UpstreamKey::CallKey`): the record's uuid, the default, would
/// differ between them.
fn executor_of_its_own(base: &str, name: &str) -> Arc<WebExecutor> {
    let web = WebExecutor::new(Arc::new(MemoryStore::new()));
    web.register(
        Action::new(name, Method::POST, format!("{base}/charges"))
            .upstream_key(UpstreamKey::CallKey),
    )
    .unwrap();
    Arc::new(web)
}

fn retry() -> Retry {
    Retry {
        attempts: 60,
        base: Duration::from_millis(20),
        max: Duration::from_millis(500),
        ..Retry::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_after_a_timed_out_attempt_gives_one_execution() {
    let gate = Gate::closed();
    let (base, keys) = service(gate.clone(), Duration::ZERO).await;
    let store = store_on(pool());
    let web = Arc::new(WebExecutor::new(store.clone()));
    let name = unique("charge");
    web.register(
        // The first attempt's timeout outlasts its claim and request on a loaded machine
        // (the test waits for the service to hold it); the lease outlasts the timeout.
        Action::new(name.clone(), Method::POST, format!("{base}/charges")).idempotent(Idempotent {
            timeout: Some(Duration::from_secs(1)),
            lease: Some(Duration::from_millis(1500)),
            ..Idempotent::default()
        }),
    )
    .unwrap();
    let input = json!({"amount": 12});
    let e = web.execute(&name, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    gate.wait_started().await;
    // Retried until the client's lease lapses, then taken over: the service answers 409
    // while its handler still runs, and the executor retries that too.
    let (w, n, i) = (web.clone(), name.clone(), input.clone());
    // Patient attempts: one cut while it records the service's answer would answer
    // Unrecorded, not a retry.
    let patient = Idempotent::new().timeout(Duration::from_secs(20));
    let retried = tokio::spawn(async move {
        retry()
            .run(|| async { Ok(w.execute_with(&n, i.clone(), &patient).await?.attempt()) })
            .await
    });
    until("the takeover's request at the service", PATIENCE, || {
        keys.lock().unwrap().len() >= 2
    })
    .await;
    gate.open_all();
    let done = retried.await.unwrap().unwrap();
    assert_eq!(done, Dispatched::Ran(json!({"charge": 1})));
    // Started once (a handler the layer did not protect would also be cancelled when the
    // first attempt's client gave up, and never finish).
    assert_eq!(
        gate.started.load(Ordering::SeqCst),
        1,
        "the handler started again"
    );
    assert_eq!(gate.runs(), 1, "the handler ran more than once");
    let keys = keys.lock().unwrap().clone();
    assert!(keys.len() >= 2, "{keys:?}");
    assert!(keys.iter().all(|k| k == &keys[0]), "one key: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_sending_the_same_call_at_once_give_one_execution() {
    let gate = Gate::closed();
    let (base, keys) = service(gate.clone(), Duration::from_secs(20)).await;
    let name = unique("charge");
    let (a, b) = (
        executor_of_its_own(&base, &name),
        executor_of_its_own(&base, &name),
    );
    let input = json!({"amount": 3});
    let first = {
        let (a, n, i) = (a.clone(), name.clone(), input.clone());
        tokio::spawn(async move { a.execute(&n, i).await })
    };
    gate.wait_started().await;
    let second = {
        let (b, n, i) = (b.clone(), name.clone(), input.clone());
        tokio::spawn(async move { b.execute(&n, i).await })
    };
    until("the second request at the service", PATIENCE, || {
        keys.lock().unwrap().len() >= 2
    })
    .await;
    gate.open_all();
    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert_eq!(first, Dispatched::Ran(json!({"charge": 1})));
    assert_eq!(
        second,
        Dispatched::Ran(json!({"charge": 1})),
        "replayed by the service"
    );
    assert_eq!(gate.runs(), 1);
}

/// The layer's 409 for a key still running carries `Retry-After` (the store's estimate: one
/// second for a scope with no completed call yet), and the executor hands it on, so that
/// `Retry` comes back when the service said to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_retry_after_reaches_the_caller() {
    let gate = Gate::closed();
    let (base, keys) = service(gate.clone(), Duration::ZERO).await;
    let name = unique("charge");
    let (a, b) = (
        executor_of_its_own(&base, &name),
        executor_of_its_own(&base, &name),
    );
    let input = json!({"amount": 5});
    let first = {
        let (a, n, i) = (a.clone(), name.clone(), input.clone());
        tokio::spawn(async move { a.execute(&n, i).await })
    };
    gate.wait_started().await;
    let e = b.execute(&name, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Http, "{e}");
    assert_eq!(e.response().unwrap()["status"], 409);
    assert!(e.retryable());
    assert_eq!(e.retry_after(), Some(Duration::from_secs(1)));
    gate.open_all();
    assert_eq!(
        first.await.unwrap().unwrap(),
        Dispatched::Ran(json!({"charge": 1}))
    );
    let again = b.execute(&name, input).await.unwrap();
    assert_eq!(again, Dispatched::Ran(json!({"charge": 1})), "replayed");
    assert_eq!(gate.runs(), 1);
    assert_eq!(keys.lock().unwrap().len(), 3);
}
