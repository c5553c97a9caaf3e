//! The database stopped mid-run (a server of the test's own, `TempCluster`): a request in
//! flight still gets its answer, new keyed requests get 503 with Retry-After (or run
//! unprotected where the layer fails open), and service resumes when the database returns.

use std::time::Duration;

use axum::routing::post;
use axum::Router;
use pg_idempotency_server::Rule;
use pg_idempotency_tests::{backend, install_backend, TempCluster};

use crate::common::*;

fn app(gate: Gate) -> Router {
    let route = |gate: Gate| {
        post(move || {
            let gate = gate.clone();
            async move {
                gate.pass().await;
                (http::StatusCode::CREATED, format!("run {}", gate.done()))
            }
        })
    };
    Router::new()
        .route("/charges", route(gate.clone()))
        .route("/open", route(gate))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_stopped_mid_run_is_503_and_service_resumes() {
    if pg_idempotency_tests::skip_through_pooler(
        "it stops and starts a server of its own, which no pooler stands in front of",
    ) {
        return;
    }
    let cluster = tokio::task::spawn_blocking(|| {
        let c = TempCluster::start("srv-store-down", &[]);
        install_backend(&c.dsn("postgres"), backend());
        c
    })
    .await
    .unwrap();
    let cluster = std::sync::Arc::new(cluster);
    let store = store_on(pool_for(&cluster.dsn("postgres"), 8));
    let gate = Gate::closed();
    let closed = layer(store.clone())
        .rule("/charges", Rule::required())
        .rule("/open", Rule::off())
        .store_timeout(Duration::from_secs(5))
        .unavailable_retry_after(Duration::from_secs(2));
    let open = layer(store.clone())
        .rule("/open", Rule::required())
        .rule("/charges", Rule::off())
        .fail_open(true);
    let app = Router::new()
        .merge(app(gate.clone()).route_layer(closed))
        .route_layer(open);
    let base = serve(app).await;
    let http = http();
    let principal = unique("p");
    let url = format!("{base}/charges");

    let served = keyed(&http, &url, &principal, "k1", "{}");
    gate.let_one();
    let r = served.send().await.unwrap();
    assert_eq!(r.status(), http::StatusCode::CREATED);
    gate.wait_started().await;

    // In flight when the database stops: its answer still goes out.
    let in_flight = tokio::spawn(keyed(&http, &url, &principal, "k2", "{}").send());
    gate.wait_started().await;
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.stop_immediate())
        .await
        .unwrap();
    gate.let_one();
    let r = in_flight.await.unwrap().unwrap();
    assert_eq!(
        r.status(),
        http::StatusCode::CREATED,
        "a success turned into an error"
    );
    assert_eq!(r.text().await.unwrap(), "run 2");

    // Stopped: fail closed, with Retry-After; the handler does not run.
    let r = keyed(&http, &url, &principal, "k3", "{}")
        .send()
        .await
        .unwrap();
    let (status, kind, retry_after) = problem(r).await;
    assert_eq!(
        (status, kind.as_str()),
        (503, "idempotency-store-unavailable")
    );
    assert_eq!(retry_after.as_deref(), Some("2"));
    assert_eq!(gate.runs(), 2);
    // Where the layer fails open, the handler runs unprotected.
    gate.let_one();
    let r = keyed(&http, &format!("{base}/open"), &principal, "k4", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), http::StatusCode::CREATED);
    assert_eq!(gate.runs(), 3);

    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.start_again())
        .await
        .unwrap();
    // Back: the refused request runs (the pool reconnects on its own).
    gate.open_all();
    let limit = std::time::Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let r = keyed(&http, &url, &principal, "k3", "{}")
            .send()
            .await
            .unwrap();
        if r.status() != http::StatusCode::SERVICE_UNAVAILABLE {
            break r;
        }
        assert!(
            std::time::Instant::now() < limit,
            "still 503 30 s after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answer.status(), http::StatusCode::CREATED);
    assert!(!replayed(&answer));
    assert_eq!(gate.runs(), 4);
    // What was remembered before the stop survived it.
    let r = keyed(&http, &url, &principal, "k1", "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&r));
    assert_eq!(r.text().await.unwrap(), "run 1");
}
