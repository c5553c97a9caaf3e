//! The front: stdio (the MCP client started the proxy) or Streamable HTTP (any number of
//! clients, each session with its own upstream connection).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;

use crate::config::Front;
use crate::listener;
use crate::principal::Principal;
use crate::proxy::Proxy;
use crate::session::Session;
use crate::sessions::{self, Sessions};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8931";
pub const DEFAULT_PATH: &str = "/mcp";

/// Serves one client over this process's stdin and stdout until it goes away.
pub async fn serve_stdio(proxy: Arc<Proxy>) -> Result<()> {
    let running = Session::new(proxy)
        .serve(rmcp::transport::stdio())
        .await
        .context("the MCP client did not initialize")?;
    running.waiting().await?;
    Ok(())
}

/// Serves Streamable HTTP until the process is stopped. `ready` is told the bound address.
pub async fn serve_http(
    proxy: Arc<Proxy>,
    ready: Option<tokio::sync::oneshot::Sender<std::net::SocketAddr>>,
) -> Result<()> {
    let front = proxy.config.front.clone();
    let listen = front
        .listen
        .clone()
        .unwrap_or_else(|| DEFAULT_LISTEN.into());
    let path = front.path.clone().unwrap_or_else(|| DEFAULT_PATH.into());
    let limits = proxy.config.limits.clone();
    // An answer stream pings more often than a quiet connection is closed.
    let ping = (limits.connection_idle_timeout / 3).min(Duration::from_secs(15));
    let mut config = StreamableHttpServerConfig::default().with_sse_keep_alive(Some(ping));
    if let Some(hosts) = &front.allowed_hosts {
        config = config.with_allowed_hosts(hosts.clone());
    }
    let handlers = proxy.clone();
    let sessions = Sessions::start(&limits);
    let service = StreamableHttpService::new(
        move || Ok(Session::new(handlers.clone())),
        sessions.clone(),
        config,
    );
    let auth = Arc::new(Auth::of(&front)?);
    // Layers run last added first: the principal is named before the session guard looks.
    let app = axum::Router::new()
        .nest_service(&path, service)
        .layer(middleware::from_fn_with_state(sessions, sessions::guard))
        .layer(middleware::from_fn_with_state(auth, authenticate));
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, path, "serving MCP over Streamable HTTP");
    if let Some(ready) = ready {
        let _ = ready.send(bound);
    }
    listener::serve(listener, app, &limits).await
}

/// Who may call, and as whom.
struct Auth {
    tokens: Vec<(String, String)>,
    principal_header: Option<String>,
    default: Option<String>,
}

impl Auth {
    fn of(front: &Front) -> Result<Auth> {
        let mut tokens = Vec::new();
        for c in &front.clients {
            let token = match (&c.token, &c.token_env) {
                (Some(t), _) => t.clone(),
                (None, Some(var)) => std::env::var(var).with_context(|| {
                    format!(
                        "[[front.clients]] {:?}: the variable {var} is not set",
                        c.principal
                    )
                })?,
                (None, None) => unreachable!("checked when the configuration was read"),
            };
            tokens.push((token, c.principal.clone()));
        }
        let open = tokens.is_empty() && front.principal_header.is_none();
        Ok(Auth {
            tokens,
            principal_header: front.principal_header.clone(),
            default: front
                .principal
                .clone()
                .or_else(|| open.then(|| "anonymous".to_string())),
        })
    }

    fn principal(&self, request: &Request) -> Result<String, &'static str> {
        let headers = request.headers();
        if let Some(bearer) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        {
            if !self.tokens.is_empty() {
                return self
                    .tokens
                    .iter()
                    .find(|(t, _)| constant_time_eq(t.as_bytes(), bearer.trim().as_bytes()))
                    .map(|(_, p)| p.clone())
                    .ok_or("the bearer token is not one the proxy knows");
            }
        }
        if let Some(name) = &self.principal_header {
            if let Some(p) = headers.get(name.as_str()).and_then(|v| v.to_str().ok()) {
                if !p.trim().is_empty() {
                    return Ok(p.trim().to_string());
                }
            }
        }
        self.default
            .clone()
            .ok_or("the request names no principal: send a bearer token the proxy knows")
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authenticate(State(auth): State<Arc<Auth>>, mut request: Request, next: Next) -> Response {
    match auth.principal(&request) {
        Ok(p) => {
            request.extensions_mut().insert(Principal(p));
            next.run(request).await
        }
        Err(why) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            why,
        )
            .into_response(),
    }
}
