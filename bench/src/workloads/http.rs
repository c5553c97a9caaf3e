//! The HTTP layer's cost per request: one axum service on 127.0.0.1, in this process, with
//! a handler that does nothing but answer `201 {"ok": true}`, reached by one keep-alive
//! client; the same handler behind `IdempotencyLayer` (over `PgStore`) beside it without
//! the layer, alternately in the same run:
//!
//! - a new `Idempotency-Key` on every request: the layer buffers the body, claims, runs
//!   the handler in its own task, and completes (two store round trips);
//! - a key already answered: the layer replays the stored answer (one store round trip)
//!   and the handler does not run.
//!
//! The handler is empty on purpose: the ratio is the layer's whole cost, not diluted by
//! a handler's own work (a real handler's database write makes it smaller).

use std::sync::Arc;

use axum::extract::MatchedPath;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use pg_idempotency_client::PgStore;
use pg_idempotency_server::{IdempotencyLayer, Rule, Scope};
use serde_json::{json, Value};

use super::Row;
use crate::harness::{compare, fresh_key, BenchResult, Op, Plan};

const ROUTE: &str = "/charges";

async fn handler() -> (StatusCode, Json<Value>) {
    (StatusCode::CREATED, Json(json!({"ok": true})))
}

fn bare() -> Router {
    Router::new().route(ROUTE, post(handler))
}

fn layered(dsn: &str, pool_size: usize) -> BenchResult<Router> {
    let config: tokio_postgres::Config = dsn.parse()?;
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(pool_size)
        .build()?;
    let layer = IdempotencyLayer::new(Arc::new(PgStore::new(pool)), |parts| {
        let route = parts.extensions.get::<MatchedPath>()?.as_str();
        Some(Scope::new("bench", route))
    })
    .rule(ROUTE, Rule::required());
    Ok(Router::new().route(ROUTE, post(handler)).route_layer(layer))
}

/// Serves `router` on a free port of 127.0.0.1 for the rest of the process; its URL.
async fn serve(router: Router) -> BenchResult<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}{ROUTE}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(url)
}

/// POSTs the same small JSON body with `key`, and checks the answer is the handler's
/// (201), replayed or not as expected: a 409 or 503 measured as a request would be a lie.
async fn post_once(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    replayed: Option<bool>,
) -> BenchResult<()> {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(r#"{"amount": 500, "currency": "eur"}"#)
        .send()
        .await?;
    let status = response.status();
    let was_replayed = response.headers().get("idempotent-replayed").is_some();
    let body = response.bytes().await?;
    if status != StatusCode::CREATED {
        return Err(format!(
            "{url} answered {status}: {}",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    if replayed.is_some_and(|r| r != was_replayed) {
        return Err(format!("{url}: replayed {was_replayed}, expected {replayed:?}").into());
    }
    Ok(())
}

fn requests(
    http: reqwest::Client,
    url: String,
    key: impl Fn(u64) -> String + Send + Sync + 'static,
    replayed: Option<bool>,
) -> Op {
    let (url, key) = (Arc::new(url), Arc::new(key));
    Arc::new(move |_, n| {
        let (http, url, key) = (http.clone(), url.clone(), key.clone());
        Box::pin(async move { post_once(&http, &url, &key(n), replayed).await })
    })
}

pub async fn run(dsn: &str, plan: Plan, replay_keys: u64) -> BenchResult<Vec<Row>> {
    let replay_keys = replay_keys.max(1);
    // Room for each client's claim and its lease heartbeat.
    let layered_url = serve(layered(dsn, 2 * plan.clients + 2)?).await?;
    let bare_url = serve(bare()).await?;
    let http = reqwest::Client::new();

    // Answered keys to replay: each answered once before the measurement.
    let replay_prefix = fresh_key("http-replay");
    for i in 0..replay_keys {
        post_once(
            &http,
            &layered_url,
            &format!("{replay_prefix}-{i}"),
            Some(false),
        )
        .await?;
    }

    let baseline_name = "the same handler without the layer";
    let workload = "HTTP layer (axum on 127.0.0.1, empty handler)";
    let mut rows = Vec::new();
    let new_keys = requests(
        http.clone(),
        layered_url.clone(),
        |_| fresh_key("http"),
        Some(false),
    );
    let replays = requests(
        http.clone(),
        layered_url,
        move |n| format!("{replay_prefix}-{}", n % replay_keys),
        Some(true),
    );
    for (name, ours) in [
        (
            "`IdempotencyLayer`, a new key per request (claim + complete)",
            new_keys,
        ),
        ("`IdempotencyLayer`, an answered key (replay)", replays),
    ] {
        let baseline = requests(http.clone(), bare_url.clone(), |_| fresh_key("bare"), None);
        let (ours, baseline) = compare(dsn, plan, ours, baseline).await?;
        rows.push(Row {
            workload: workload.into(),
            ours_name: name.into(),
            baseline_name: baseline_name.into(),
            ours,
            baseline,
            goal: None,
        });
    }
    Ok(rows)
}
