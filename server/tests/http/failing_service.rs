//! A wrapped service that fails (its `Err`, not an answer): the claim is released, so a
//! retry runs it again, and the error reaches the caller as it was. axum's routes never
//! fail, so this calls the layer's service directly (tower's `oneshot`), over `PgStore` on
//! the database under test.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use pg_idempotency_server::{IdempotencyLayer, Rule};
use tower::{service_fn, Layer, ServiceExt};

use crate::common::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn request(key: &str, principal: &str) -> Request<Full<Bytes>> {
    Request::post("/fails-once")
        .header("idempotency-key", key)
        .header("x-principal", principal)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(b"{\"amount\": 5}")))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_service_is_released_and_a_retry_runs_it_again() {
    let store = store_on(pool());
    let runs = Arc::new(AtomicU32::new(0));
    let inner = {
        let runs = runs.clone();
        service_fn(move |_req: Request<_>| {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if run == 1 {
                    Err::<Response<Full<Bytes>>, BoxError>("the upstream connection broke".into())
                } else {
                    Ok(Response::builder()
                        .status(StatusCode::CREATED)
                        .body(Full::new(Bytes::from(format!("run {run}"))))
                        .unwrap())
                }
            }
        })
    };
    let layer =
        IdempotencyLayer::new(store.clone(), scope_of).rule("/fails-once", Rule::required());
    let service = layer.layer(inner);
    let (key, principal) = (unique("fails"), unique("caller"));

    let failed = service.clone().oneshot(request(&key, &principal)).await;
    let err = failed.expect_err("the service's error reaches the caller");
    assert_eq!(err.to_string(), "the upstream connection broke");
    let scope = store_scope(&principal, "/fails-once");
    assert!(
        store.lookup(&scope, &key).await.unwrap().is_none(),
        "the failed call's claim is released"
    );

    let retried = service
        .clone()
        .oneshot(request(&key, &principal))
        .await
        .unwrap();
    assert_eq!(retried.status(), StatusCode::CREATED);
    let body = retried.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"run 2");

    let replayed = service.oneshot(request(&key, &principal)).await.unwrap();
    assert_eq!(
        replayed
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(&b"true"[..])
    );
    assert_eq!(
        &replayed.into_body().collect().await.unwrap().to_bytes()[..],
        b"run 2"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the service ran twice, not three times"
    );
}
