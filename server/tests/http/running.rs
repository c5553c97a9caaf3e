//! Duplicates that arrive while the handler runs, a client that goes away mid-handler, and a
//! handler that panics.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{AppendHeaders, IntoResponse};
use axum::routing::post;
use axum::Router;
use pg_idempotency_client::State;
use pg_idempotency_server::Rule;
use tokio::sync::mpsc;

use crate::common::*;

/// A charge: waits at the gate, then answers 201 with two cookies and its run number.
pub fn charge(gate: Gate) -> Router {
    Router::new().route(
        "/charges",
        post(move |body: Bytes| {
            let gate = gate.clone();
            async move {
                gate.pass().await;
                let n = gate.done();
                (
                    StatusCode::CREATED,
                    // AppendHeaders: an array of pairs would keep only the last cookie.
                    AppendHeaders([
                        (header::SET_COOKIE, "a=1; Path=/".to_string()),
                        (header::SET_COOKIE, format!("run={n}")),
                    ]),
                    format!("{{\"run\": {n}, \"len\": {}}}", body.len()),
                )
            }
        }),
    )
}

/// How many sessions of the database run `idem_begin` now (the waiting duplicates).
async fn sessions_in_begin(client: &tokio_postgres::Client) -> i64 {
    // Unnamed (query_typed): it runs through a pooler in transaction mode too.
    client
        .query_typed(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state = 'active' AND query LIKE '%idem_begin%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()[0]
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_duplicates_wait_and_get_one_answer() {
    let pool = pool();
    let store = store_on(pool.clone());
    let gate = Gate::closed();
    let idem = layer(store.clone())
        .rule("/charges", Rule::required())
        .wait(Duration::from_secs(30));
    let base = serve(charge(gate.clone()).route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/charges");
    let mut calls = Vec::new();
    for _ in 0..50 {
        let req = keyed(&http, &url, &principal, &key, "{\"amount\": 5}");
        calls.push(tokio::spawn(async move {
            let r = req.send().await.unwrap();
            let cookies: Vec<String> = r
                .headers()
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect();
            (r.status(), replayed(&r), cookies, r.bytes().await.unwrap())
        }));
    }
    gate.wait_started().await;
    // The other 49 are inside idem_begin, waiting for the first one's answer.
    let observer = pool.get().await.unwrap();
    until_async("49 duplicates waiting in idem_begin", PATIENCE, || async {
        sessions_in_begin(&observer).await >= 49
    })
    .await;
    gate.open_all();
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    assert_eq!(gate.runs(), 1, "the handler ran more than once");
    assert_eq!(gate.started.load(Ordering::SeqCst), 1);
    let first = answers.iter().find(|a| !a.1).expect("the first answer");
    assert_eq!(first.0, StatusCode::CREATED);
    assert_eq!(
        first.2,
        vec!["a=1; Path=/".to_string(), "run=1".to_string()]
    );
    assert_eq!(answers.iter().filter(|a| a.1).count(), 49, "49 replays");
    for a in &answers {
        assert_eq!((a.0, &a.3), (first.0, &first.3));
        // The first caller's cookies are its own: never handed to a replay.
        if a.1 {
            assert!(a.2.is_empty(), "a replay carried Set-Cookie: {:?}", a.2);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_without_wait_gets_409_with_retry_after() {
    let store = store_on(pool());
    let gate = Gate::closed();
    let idem = layer(store.clone()).rule("/charges", Rule::required());
    let base = serve(charge(gate.clone()).route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/charges");
    let first = tokio::spawn(keyed(&http, &url, &principal, &key, "{}").send());
    gate.wait_started().await;
    let dup = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    let (status, kind, retry_after) = problem(dup).await;
    assert_eq!((status, kind.as_str()), (409, "request-in-progress"));
    let secs: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!(secs >= 1);
    gate.open_all();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(!replayed(&first));
    let again = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&again));
    assert_eq!(gate.runs(), 1);
}

/// Notices, from outside the layer, that the server dropped a request's future before it
/// answered (hyper does so when the client goes away).
fn watch_cancellations(app: Router) -> (Router, mpsc::UnboundedReceiver<()>) {
    struct Watch(Option<mpsc::UnboundedSender<()>>);
    impl Watch {
        fn disarm(&mut self) {
            self.0 = None;
        }
    }
    impl Drop for Watch {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let app = app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let mut watch = Watch(Some(tx.clone()));
            async move {
                let r = next.run(req).await;
                watch.disarm();
                r
            }
        },
    ));
    (app, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_does_not_cancel_the_handler() {
    let store = store_on(pool());
    let gate = Gate::closed();
    let idem = layer(store.clone()).rule("/charges", Rule::required());
    let (app, mut cancelled) = watch_cancellations(charge(gate.clone()).route_layer(idem));
    let base = serve(app).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/charges");
    let call = tokio::spawn(keyed(&http, &url, &principal, &key, "{}").send());
    gate.wait_started().await;
    call.abort();
    // The server dropped the request's future: what ran inside it is cancelled, unless it
    // runs in a task of its own.
    tokio::time::timeout(Duration::from_secs(30), cancelled.recv())
        .await
        .expect("the server never noticed the client went away")
        .unwrap();
    gate.open_all();
    let scope = store_scope(&principal, "/charges");
    record_until(&store, &scope, &key, "the answer to be remembered", |r| {
        is_state(r, State::Succeeded)
    })
    .await;
    let retry = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(replayed(&retry));
    assert_eq!(retry.text().await.unwrap(), "{\"run\": 1, \"len\": 2}");
    assert_eq!(gate.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_released_and_a_retry_runs_it_again() {
    let store = store_on(pool());
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let app = Router::new().route(
        "/charges",
        post(move || {
            let runs = counted.clone();
            async move {
                if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("the first run fails");
                }
                (StatusCode::CREATED, "charged").into_response()
            }
        }),
    );
    let idem = layer(store.clone()).rule("/charges", Rule::required());
    let base = serve(app.route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/charges");
    let first = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    let (status, kind, _) = problem(first).await;
    assert_eq!((status, kind.as_str()), (500, "handler-failed"));
    let scope = store_scope(&principal, "/charges");
    assert!(
        store.lookup(&scope, &key).await.unwrap().is_none(),
        "released"
    );
    let retry = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::CREATED);
    assert!(!replayed(&retry));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_extended_while_the_handler_runs() {
    let store = store_on(pool());
    let gate = Gate::closed();
    let idem = layer(store.clone())
        .rule("/charges", Rule::required())
        .lease(Duration::from_secs(1));
    let base = serve(charge(gate.clone()).route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/charges");
    let first = tokio::spawn(keyed(&http, &url, &principal, &key, "{}").send());
    gate.wait_started().await;
    let scope = store_scope(&principal, "/charges");
    let claimed = store.lookup(&scope, &key).await.unwrap().unwrap();
    let first_lease = claimed.lease_until.unwrap();
    // Past the first lease, and the record's lease pushed out since: the heartbeat.
    record_until(
        &store,
        &scope,
        &key,
        "the lease to be extended past its first end",
        |r| {
            std::time::SystemTime::now() > first_lease
                && r.and_then(|r| r.lease_until)
                    .is_some_and(|l| l > first_lease + Duration::from_millis(300))
        },
    )
    .await;
    let dup = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(problem(dup).await.0, 409, "taken over: the lease lapsed");
    assert_eq!(gate.started.load(Ordering::SeqCst), 1);
    gate.open_all();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
}
