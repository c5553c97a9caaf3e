//! The example service's routes, built by `router` so that the binary (main.rs) and the
//! test (server/tests/http/example_service.rs) serve the same thing.
//!
//! - `POST /charges {"amount": 500, "currency": "eur"}`: a transactional handler. The
//!   charge row and the remembered answer commit in one transaction (`RequestClaim::complete_in`),
//!   so a retry can never charge twice, even when the process dies between the two. A bad
//!   amount answers 422 and is released: the caller may fix the body and retry with the
//!   same key.
//! - `POST /emails {"to": "ann@example.com"}`: a plain handler. Its 4xx (an address without
//!   `@`) are remembered and replayed, as Stripe does.
//!
//! Both require `Idempotency-Key`; the caller is named by `Authorization: Bearer <token>`
//! or `X-Api-Key: <key>` (a real service names the account the credential authenticates;
//! here the credential is the account).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{MatchedPath, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use bytes::Bytes;
use deadpool_postgres::Pool;
use pg_idempotency_client::PgStore;
use pg_idempotency_server::stored::StoredResponse;
use pg_idempotency_server::{ClientErrors, IdempotencyLayer, RequestClaim, Rule, Scope};
use serde_json::{json, Value};

/// The example's own tables, beside the extension's.
pub const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS charges (
        id bigserial PRIMARY KEY,
        principal text NOT NULL,
        amount bigint NOT NULL CHECK (amount > 0),
        currency text NOT NULL,
        upstream_key uuid NOT NULL,
        attempt int NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE IF NOT EXISTS emails (
        id bigserial PRIMARY KEY,
        principal text NOT NULL,
        recipient text NOT NULL,
        upstream_key uuid NOT NULL,
        sent_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );";

/// Creates the example's tables when they are missing.
pub async fn create_tables(pool: &Pool) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    pool.get().await?.batch_execute(SCHEMA).await?;
    Ok(())
}

/// The caller: the bearer token, else the API key. None (no credential) is refused by
/// the layer with 401 before any handler runs.
pub fn principal(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let api_key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    bearer
        .or(api_key)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}

/// The scope of a request: its caller and its route template (axum's `MatchedPath`, set
/// for layers added with `route_layer`).
fn scope_of(parts: &http::request::Parts) -> Option<Scope> {
    let route = parts.extensions.get::<MatchedPath>()?.as_str();
    Some(Scope::new(principal(&parts.headers)?, route))
}

/// The service: both routes under the idempotency layer, over `pool`'s database (which
/// has pg_idempotency and `SCHEMA`).
pub fn router(pool: Pool) -> Router {
    let store = Arc::new(PgStore::new(pool.clone()));
    let idempotency = IdempotencyLayer::new(store, scope_of)
        .rule(
            "/charges",
            Rule::required().client_errors(ClientErrors::Release),
        )
        .rule(
            "/emails",
            Rule::required().client_errors(ClientErrors::Cache),
        )
        // A duplicate that arrives while the first request runs waits for its answer.
        .wait(Duration::from_secs(2));
    Router::new()
        .route("/charges", post(charge))
        .route("/emails", post(email))
        .route_layer(idempotency)
        .with_state(pool)
}

fn json_answer(status: StatusCode, body: &Value, location: Option<String>) -> StoredResponse {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(location) = location.and_then(|l| HeaderValue::try_from(l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    StoredResponse {
        status,
        headers,
        body: Bytes::from(body.to_string()),
    }
}

fn send(answer: StoredResponse) -> Response {
    let (parts, body) = answer.into_response().into_parts();
    Response::from_parts(parts, axum::body::Body::from(body))
}

fn server_error(error: impl std::fmt::Display) -> Response {
    // A 5xx releases the claim: the caller's retry runs the handler again.
    (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
}

/// Charges once per key: the row and the answer commit together.
async fn charge(
    State(pool): State<Pool>,
    Extension(claim): Extension<RequestClaim>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    let amount = request["amount"].as_i64().filter(|a| *a > 0);
    let currency = request["currency"].as_str().unwrap_or("eur");
    let Some(amount) = amount else {
        let refusal = json!({"error": "amount must be a positive integer (in cents)"});
        return send(json_answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &refusal,
            None,
        ));
    };
    let principal = principal(&headers).unwrap_or_default();
    let mut client = match pool.get().await {
        Ok(c) => c,
        Err(e) => return server_error(e),
    };
    let tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => return server_error(e),
    };
    let row = tx
        .query_one(
            "INSERT INTO charges (principal, amount, currency, upstream_key, attempt) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[
                &principal,
                &amount,
                &currency,
                &claim.upstream_key,
                &claim.attempt,
            ],
        )
        .await;
    let id: i64 = match row {
        Ok(row) => row.get(0),
        Err(e) => return server_error(e),
    };
    let body = json!({
        "id": id,
        "amount": amount,
        "currency": currency,
        "attempt": claim.attempt,
    });
    let answer = json_answer(StatusCode::CREATED, &body, Some(format!("/charges/{id}")));
    // The answer is remembered in the charge's transaction: a rollback (or a crash before
    // the commit) leaves neither the charge nor the record, and a retry runs again.
    if let Err(e) = claim.complete_in(&tx, &answer).await {
        return server_error(e);
    }
    if let Err(e) = tx.commit().await {
        return server_error(e);
    }
    send(answer)
}

/// Sends an email (here: writes it to the outbox). Not transactional: the layer records
/// the answer once the handler has returned it.
async fn email(
    State(pool): State<Pool>,
    Extension(claim): Extension<RequestClaim>,
    headers: HeaderMap,
    Json(request): Json<Value>,
) -> Response {
    let Some(to) = request["to"].as_str().filter(|to| to.contains('@')) else {
        let refusal = json!({"error": "\"to\" must be an email address"});
        return send(json_answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &refusal,
            None,
        ));
    };
    let principal = principal(&headers).unwrap_or_default();
    let client = match pool.get().await {
        Ok(c) => c,
        Err(e) => return server_error(e),
    };
    let row = client
        .query_one(
            "INSERT INTO emails (principal, recipient, upstream_key) VALUES ($1, $2, $3) \
             RETURNING id",
            &[&principal, &to, &claim.upstream_key],
        )
        .await;
    match row {
        Ok(row) => {
            let id: i64 = row.get(0);
            let body = json!({"id": id, "to": to, "status": "queued"});
            send(json_answer(StatusCode::ACCEPTED, &body, None))
        }
        Err(e) => server_error(e),
    }
}
