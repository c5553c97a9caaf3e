//! The layer over a `PgStore` whose SQL API is in a schema other than `public` (a database
//! of the test's own, the API installed into `App Api`, which only a quoted name reaches):
//! the layer's own calls and a handler's `RequestClaim::complete_in` both go there, and
//! what `complete_in` stores goes through the same header filter as the layer's answers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, State as AxumState};
use axum::http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use pg_idempotency_client::{IdempotencyStore, PgStore, State};
use pg_idempotency_server::stored::StoredResponse;
use pg_idempotency_server::{RequestClaim, Rule};
use pg_idempotency_tests::{backend, connect_to, drop_database, fresh_database, Backend};

use crate::common::*;

const SCHEMA: &str = "App Api";

/// Installs the backend under test into `SCHEMA` in the empty database of `dsn`.
fn install_into_schema(dsn: &str) {
    let quoted = format!("\"{}\"", SCHEMA.replace('"', "\"\""));
    let mut c = connect_to(dsn);
    c.batch_execute(&format!("CREATE SCHEMA {quoted}")).unwrap();
    match backend() {
        Backend::Extension => c
            .batch_execute(&format!("CREATE EXTENSION pg_idempotency SCHEMA {quoted}"))
            .unwrap_or_else(|e| panic!("CREATE EXTENSION ... SCHEMA {quoted}: {e}")),
        Backend::Portable => {
            let (ok, out) = pg_idempotency_tests::run_sql_file(
                dsn,
                "pg_idempotency.sql",
                &[("schema", SCHEMA)],
                &[],
            );
            assert!(ok, "portable install into {quoted} failed:\n{out}");
        }
    }
}

/// Completes in its own transaction, with a cookie in the answer it stores.
async fn pay(
    AxumState(pool): AxumState<deadpool_postgres::Pool>,
    Extension(claim): Extension<RequestClaim>,
) -> Response<Body> {
    let mut client = pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::SET_COOKIE, HeaderValue::from_static("session=s1"));
    let answer = StoredResponse {
        status: StatusCode::CREATED,
        headers,
        body: Bytes::from_static(b"{\"paid\": true}"),
    };
    claim.complete_in(&tx, &answer).await.unwrap();
    tx.commit().await.unwrap();
    answer.into_response().map(Body::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_in_another_schema_serves_the_layer_and_complete_in() {
    let name = format!(
        "pidem_srv_schema_{}",
        match backend() {
            Backend::Extension => "ext",
            Backend::Portable => "por",
        }
    );
    let dsn = {
        let name = name.clone();
        tokio::task::spawn_blocking(move || {
            let dsn = fresh_database(&name);
            install_into_schema(&dsn);
            dsn
        })
        .await
        .unwrap()
    };
    let pool = pool_for(&dsn, 8);
    let store: Arc<dyn IdempotencyStore> = Arc::new(
        PgStore::new(pool.clone())
            .statement_mode(statement_mode())
            .schema(SCHEMA)
            .unwrap(),
    );
    let gate = Gate::open();
    let charges = {
        let gate = gate.clone();
        post(move || {
            let gate = gate.clone();
            async move {
                gate.pass().await;
                (StatusCode::CREATED, format!("run {}", gate.done()))
            }
        })
    };
    let idem = layer(store.clone())
        .rule("/charges", Rule::required())
        .rule("/pay", Rule::required());
    let app = Router::new()
        .route("/charges", charges)
        .route("/pay", post(pay))
        .route_layer(idem)
        .with_state(pool.clone());
    let base = serve(app).await;
    let http = http();
    let principal = unique("p");

    // The layer's own claim and completion.
    let url = format!("{base}/charges");
    let first = keyed(&http, &url, &principal, "k1", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let again = keyed(&http, &url, &principal, "k1", "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&again));
    assert_eq!(again.text().await.unwrap(), "run 1");
    assert_eq!(gate.runs(), 1);

    // The handler's completion in its own transaction, in the same schema.
    let url = format!("{base}/pay");
    let first = keyed(&http, &url, &principal, "k2", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(header(&first, "set-cookie"), Some("session=s1"));
    let record = store
        .lookup(&store_scope(&principal, "/pay"), "k2")
        .await
        .unwrap()
        .expect("completed by the handler");
    assert_eq!(record.state, State::Succeeded);
    let stored = record.response.expect("the stored answer");
    assert!(
        !stored["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "set-cookie"),
        "complete_in stored a cookie: {stored}"
    );
    let again = keyed(&http, &url, &principal, "k2", "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&again));
    assert_eq!(header(&again, "set-cookie"), None);
    assert_eq!(header(&again, "content-type"), Some("application/json"));

    drop(store);
    pool.close();
    tokio::task::spawn_blocking(move || drop_database(&name))
        .await
        .unwrap();
}
