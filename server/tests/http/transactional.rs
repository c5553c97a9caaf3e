//! A handler that completes the call inside its own transaction (`RequestClaim::complete_in`):
//! its write and the remembered answer commit together, or neither does.

use axum::body::Body;
use axum::extract::{Extension, State as AxumState};
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use pg_idempotency_client::State;
use pg_idempotency_server::stored::StoredResponse;
use pg_idempotency_server::{RequestClaim, Rule};

use crate::common::*;

/// Writes an effect row, completes in the same transaction, then commits or rolls back as
/// the `x-mode` header says (not part of the fingerprint: a retry may change it).
async fn pay(
    AxumState(pool): AxumState<deadpool_postgres::Pool>,
    Extension(claim): Extension<RequestClaim>,
    headers: HeaderMap,
) -> Response<Body> {
    let mode = headers
        .get("x-mode")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("commit")
        .to_string();
    let mut client = pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    tx.execute(
        "INSERT INTO pgidem_srv_effects (key, attempt) VALUES ($1, $2)",
        &[&claim.key, &claim.attempt],
    )
    .await
    .unwrap();
    let mut h = http::HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let stored = StoredResponse {
        status: StatusCode::CREATED,
        headers: h,
        body: Bytes::from(format!("{{\"paid\": \"{}\"}}", claim.key)),
    };
    claim.complete_in(&tx, &stored).await.unwrap();
    let answer = stored.into_response().map(Body::from);
    match mode.as_str() {
        "commit" => {
            tx.commit().await.unwrap();
            answer
        }
        "rollback-500" => {
            tx.rollback().await.unwrap();
            Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .body(Body::empty())
                .unwrap()
        }
        // Rolled back, yet it claims success: the layer sees the claim still running
        // under its fence and releases it.
        _ => {
            tx.rollback().await.unwrap();
            answer
        }
    }
}

async fn effects(pool: &deadpool_postgres::Pool, key: &str) -> i64 {
    pool.get()
        .await
        .unwrap()
        .query_typed(
            "SELECT count(*) FROM pgidem_srv_effects WHERE key = $1",
            &[(&key, tokio_postgres::types::Type::TEXT)],
        )
        .await
        .unwrap()[0]
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effect_and_the_completion_commit_together() {
    if pg_idempotency_tests::skip_through_proxy("the effect and the completion in one transaction")
    {
        return;
    }
    let pool = pool();
    pool.get()
        .await
        .unwrap()
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS pgidem_srv_effects (key text NOT NULL, attempt int NOT NULL)",
        )
        .await
        .unwrap();
    let store = store_on(pool.clone());
    let idem = layer(store.clone()).rule("/pay", Rule::required());
    let app = Router::new()
        .route("/pay", post(pay))
        .route_layer(idem)
        .with_state(pool.clone());
    let base = serve(app).await;
    let http = http();
    let principal = unique("p");
    let url = format!("{base}/pay");
    let scope = store_scope(&principal, "/pay");
    let send = |key: String, mode: &'static str| {
        keyed(&http, &url, &principal, &key, "{\"amount\": 1}")
            .header("x-mode", mode)
            .send()
    };

    // Committed: one effect, the answer remembered by the handler's own completion.
    let k = unique("commit");
    let r = send(k.clone(), "commit").await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let body = r.text().await.unwrap();
    let record = store.lookup(&scope, &k).await.unwrap().unwrap();
    assert_eq!(record.state, State::Succeeded);
    let again = send(k.clone(), "commit").await.unwrap();
    assert!(replayed(&again));
    assert_eq!(again.text().await.unwrap(), body);
    assert_eq!(effects(&pool, &k).await, 1);

    // Rolled back (with a 500, or claiming 201): no effect, no record; a retry runs it.
    for mode in ["rollback-500", "rollback-201"] {
        let k = unique(mode);
        let r = send(k.clone(), mode).await.unwrap();
        assert!(!replayed(&r), "{mode}");
        assert_eq!(effects(&pool, &k).await, 0, "{mode}");
        assert!(
            store.lookup(&scope, &k).await.unwrap().is_none(),
            "{mode}: the claim was not released"
        );
        let retry = send(k.clone(), "commit").await.unwrap();
        assert_eq!(retry.status(), StatusCode::CREATED, "{mode}");
        assert!(!replayed(&retry), "{mode}: ran again");
        assert_eq!(effects(&pool, &k).await, 1, "{mode}");
    }
}
