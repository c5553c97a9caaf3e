//! Which answers are remembered (replayed to a retry) and which are released (a retry runs
//! the handler again): 2xx, 4xx per the route's rule, 5xx, `Cache-Control: no-store`,
//! streamed and oversized answers.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http_body::Frame;
use pg_idempotency_client::State;
use pg_idempotency_server::{ClientErrors, IdempotencyLayer, Rule};

use crate::common::*;

/// A body of a few chunks whose length is not known in advance (as a stream's).
struct Chunks(VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// `/answer/{what}`: answers per `what`, with its run number in the body.
fn answers(gate: Gate) -> Router {
    Router::new().route(
        "/answer/{what}",
        post(
            move |axum::extract::Path(what): axum::extract::Path<String>| {
                let gate = gate.clone();
                async move {
                    gate.pass().await;
                    let n = gate.done();
                    let text = format!("run {n}");
                    match what.as_str() {
                        "bad-request" => (StatusCode::BAD_REQUEST, text).into_response(),
                        "conflict" => (StatusCode::CONFLICT, text).into_response(),
                        "server-error" => (StatusCode::SERVICE_UNAVAILABLE, text).into_response(),
                        "no-store" => {
                            ([(header::CACHE_CONTROL, "private, no-store")], text).into_response()
                        }
                        "streamed" => Response::new(Body::new(Chunks(VecDeque::from(vec![
                            Bytes::from(text),
                            Bytes::from_static(b" and more"),
                        ])))),
                        "large" => format!("{text} {}", "x".repeat(2000)).into_response(),
                        _ => (StatusCode::CREATED, text).into_response(),
                    }
                }
            },
        ),
    )
}

struct Case {
    base: String,
    store: std::sync::Arc<dyn pg_idempotency_client::IdempotencyStore>,
    gate: Gate,
    http: reqwest::Client,
    principal: String,
}

async fn case(configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer) -> Case {
    let store = store_on(pool());
    let gate = Gate::open();
    let idem = configure(layer(store.clone()).max_response_bytes(1024));
    let base = serve(answers(gate.clone()).route_layer(idem)).await;
    Case {
        base,
        store,
        gate,
        http: http(),
        principal: unique("p"),
    }
}

impl Case {
    /// Sends `what` twice under one key: both answers (status, replayed, body).
    async fn twice(&self, what: &str) -> [(u16, bool, String); 2] {
        let key = unique("k");
        let url = format!("{}/answer/{what}", self.base);
        let mut out = Vec::new();
        for _ in 0..2 {
            let r = keyed(&self.http, &url, &self.principal, &key, "{}")
                .send()
                .await
                .unwrap();
            out.push((r.status().as_u16(), replayed(&r), r.text().await.unwrap()));
        }
        let scope = store_scope(&self.principal, "/answer/{what}");
        let record = self.store.lookup(&scope, &key).await.unwrap();
        // A replayed answer is a completed record; a released one left none.
        assert_eq!(
            record.map(|r| r.state),
            if out[1].1 {
                Some(if out[0].0 < 400 {
                    State::Succeeded
                } else {
                    State::Failed
                })
            } else {
                None
            },
            "{what}"
        );
        [out[0].clone(), out[1].clone()]
    }
}

/// Both requests ran the handler, one after the other.
fn ran_twice(what: &str, got: &[(u16, bool, String); 2], status: u16) {
    let run = |text: &str| -> u32 { text.trim_start_matches("run ").parse().unwrap() };
    assert_eq!((got[0].0, got[0].1), (status, false), "{what}");
    assert_eq!((got[1].0, got[1].1), (status, false), "{what}: replayed");
    assert_eq!(run(&got[1].2), run(&got[0].2) + 1, "{what}: not run again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_is_remembered_and_replayed() {
    let c = case(|l| l.rule("/answer/{what}", Rule::required())).await;
    let got = c.twice("created").await;
    assert_eq!(got[0], (201, false, "run 1".into()));
    assert_eq!(got[1], (201, true, "run 1".into()));
    assert_eq!(c.gate.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_cached_or_released_per_rule() {
    let cache = case(|l| l.rule("/answer/{what}", Rule::required())).await;
    let got = cache.twice("bad-request").await;
    assert_eq!(got[0], (400, false, "run 1".into()));
    assert_eq!(
        got[1],
        (400, true, "run 1".into()),
        "a cached 400 is replayed"
    );
    // A 409 says "try again": released even where client errors are cached.
    ran_twice("conflict", &cache.twice("conflict").await, 409);

    let release = case(|l| {
        l.rule(
            "/answer/{what}",
            Rule::required().client_errors(ClientErrors::Release),
        )
    })
    .await;
    ran_twice("bad-request", &release.twice("bad-request").await, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_is_released() {
    let c = case(|l| l.rule("/answer/{what}", Rule::required())).await;
    ran_twice("server-error", &c.twice("server-error").await, 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_control_no_store_is_released() {
    let c = case(|l| l.rule("/answer/{what}", Rule::required())).await;
    ran_twice("no-store", &c.twice("no-store").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_forwarded_whole_and_released() {
    let c = case(|l| l.rule("/answer/{what}", Rule::required())).await;
    let got = c.twice("streamed").await;
    assert_eq!(got[0], (200, false, "run 1 and more".into()));
    assert_eq!(got[1], (200, false, "run 2 and more".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_max_response_bytes_is_forwarded_whole_and_released() {
    let c = case(|l| l.rule("/answer/{what}", Rule::required())).await;
    let got = c.twice("large").await;
    let whole = |n: u32| format!("run {n} {}", "x".repeat(2000));
    assert_eq!(got[0], (200, false, whole(1)));
    assert_eq!(got[1], (200, false, whole(2)));
}
