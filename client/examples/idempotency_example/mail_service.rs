//! A stand-in for the mail provider (`POST /v1/emails`), served in this process: it sends
//! (keeps) every email it is asked to, and notes each request's method and
//! `Idempotency-Key`, so that what reached it can be counted.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// One request the provider got: its method, its `Idempotency-Key`, its body.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub idempotency_key: Option<String>,
    pub body: Value,
}

#[derive(Clone, Default)]
pub struct MailService {
    pub received: Arc<Mutex<Vec<Received>>>,
    /// `http://127.0.0.1:<port>/v1/emails`
    pub endpoint: String,
}

impl MailService {
    /// Serves it on a free local port until the process ends.
    pub async fn start() -> std::io::Result<MailService> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let service = MailService {
            received: Arc::default(),
            endpoint: format!("http://{}/v1/emails", listener.local_addr()?),
        };
        let app = Router::new()
            .route("/v1/emails", post(send))
            .with_state(service.received.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(service)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

async fn send(
    State(received): State<Arc<Mutex<Vec<Received>>>>,
    method: Method,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Json<Value> {
    let mut received = received.lock().unwrap_or_else(|p| p.into_inner());
    received.push(Received {
        method: method.to_string(),
        idempotency_key: headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: body.clone(),
    });
    Json(json!({"email_id": received.len(), "to": body["to"]}))
}
