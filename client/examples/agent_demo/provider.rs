//! The demo's payments provider, served in this process: a charge needs
//! `Authorization: Bearer sk_demo`, and like many real APIs it does not deduplicate by
//! itself; it keeps each charge's `reference` (the caller's name for it) and can be asked
//! for a charge by that reference.

use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

pub const API_KEY: &str = "sk_demo";

#[derive(Clone, Default)]
pub struct Charges(Arc<Mutex<Vec<Value>>>);

impl Charges {
    /// How many charges a customer has.
    pub fn count(&self, customer: &str) -> usize {
        self.0
            .lock()
            .map(|c| c.iter().filter(|c| c["customer"] == customer).count())
            .unwrap_or(0)
    }
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {API_KEY}"))
}

async fn charge(
    State(charges): State<Charges>,
    Path(customer): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    if !authorized(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "no or wrong API key"})),
        );
    }
    let mut all = charges.0.lock().unwrap_or_else(|p| p.into_inner());
    let charge = json!({
        "charge": format!("ch_{}", all.len() + 1),
        "customer": customer,
        "amount_cents": body["amount_cents"],
        "reference": body["reference"],
    });
    all.push(charge.clone());
    (StatusCode::OK, Json(charge))
}

async fn find(
    State(charges): State<Charges>,
    headers: HeaderMap,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> (StatusCode, Json<Value>) {
    if !authorized(&headers) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "no or wrong API key"})),
        );
    }
    let all = charges.0.lock().unwrap_or_else(|p| p.into_inner());
    match all
        .iter()
        .find(|c| c["reference"].as_str() == q.get("reference").map(String::as_str))
    {
        Some(c) => (StatusCode::OK, Json(c.clone())),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "no such charge"})),
        ),
    }
}

/// Serves the provider on a free local port; its base URL and its ledger of charges.
pub async fn start() -> std::io::Result<(String, Charges)> {
    let charges = Charges::default();
    let app = Router::new()
        .route("/v1/customers/{customer}/charges", post(charge))
        .route("/v1/charges", get(find))
        .with_state(charges.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((base, charges))
}
