//! The front: stdio (the MCP client started the proxy) or Streamable HTTP (any number of
//! clients, each session with its own upstream connection).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::middleware;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;

use crate::auth::{self, Auth};
use crate::listener;
use crate::malformed_http;
use crate::origin::{self, Origins};
use crate::proxy::Proxy;
use crate::session::Session;
use crate::sessions::{self, Sessions};
use crate::stdio_front;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8931";
pub const DEFAULT_PATH: &str = "/mcp";

/// Serves one client over this process's stdin and stdout until it goes away.
pub async fn serve_stdio(proxy: Arc<Proxy>) -> Result<()> {
    let (transport, written) = stdio_front::open();
    let served = async {
        let running = Session::new(proxy)
            .serve(transport)
            .await
            .context("the MCP client did not initialize")?;
        running.waiting().await?;
        Ok(())
    }
    .await;
    // The answers to the last lines reach stdout before the process ends.
    let _ = written.await;
    served
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
    let max_body = config.max_request_body_bytes;
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
    // The last layer runs first: a foreign Origin is refused before its credential is
    // looked at, the principal is named before the session guard looks, and MCP sees only
    // requests with a principal. A malformed body is answered before a session is looked
    // for or a place reserved for one.
    let auth = Arc::new(Auth::of(&front)?);
    let origins = Arc::new(Origins::of(&front)?);
    let app = axum::Router::new()
        .nest_service(&path, service)
        .layer(middleware::from_fn_with_state(sessions, sessions::guard))
        .layer(middleware::from_fn_with_state(
            max_body,
            malformed_http::check,
        ))
        .layer(middleware::from_fn_with_state(auth, auth::authenticate))
        .layer(middleware::from_fn_with_state(origins, origin::check));
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
