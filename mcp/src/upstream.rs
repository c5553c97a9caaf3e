//! The upstream server: started as a child process (stdio) or reached over Streamable
//! HTTP, one connection per front session, initialized with the front client's own
//! `initialize` parameters so that the server sees the client's capabilities (sampling,
//! elicitation, roots). What the server asks of the client, and tells it, is relayed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use rmcp::model::{
    ClientConfig, ClientRequest, ClientResult, ErrorData, GetMeta, NumberOrString, ProgressToken,
    ServerNotification, ServerRequest,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess, Transport};
use rmcp::{Peer, RoleClient, RoleServer, Service, ServiceExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config;
use crate::limits::{self, Limits};
use crate::upstream_child;
use crate::upstream_http::KeyedClient;

/// How to reach the upstream server.
#[derive(Debug, Clone)]
pub enum Target {
    Command {
        program: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
        slots: ProcessSlots,
    },
    Url {
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl Target {
    pub fn of(u: &config::Upstream, limits: &Limits) -> Result<Target> {
        if let Some(url) = &u.url {
            return Ok(Target::Url {
                url: url.clone(),
                headers: u.headers.clone().into_iter().collect(),
            });
        }
        let Some(program) = &u.command else {
            anyhow::bail!("no upstream server: give [upstream] command (a server to start) or url (one to reach over Streamable HTTP), or the server's command after `--`");
        };
        Ok(Target::Command {
            program: program.clone(),
            args: u.args.clone(),
            env: u.env.clone().into_iter().collect(),
            cwd: u.cwd.clone(),
            slots: ProcessSlots::new(limits.max_upstream_processes.get()),
        })
    }
}

/// The upstream child processes alive at once, bounded (`limits.max_upstream_processes`):
/// a slot is taken before a process starts, and given back once it has ended.
#[derive(Debug, Clone)]
pub struct ProcessSlots {
    slots: Arc<Semaphore>,
    limit: usize,
}

impl ProcessSlots {
    pub fn new(limit: usize) -> ProcessSlots {
        ProcessSlots {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    fn take(&self) -> Result<OwnedSemaphorePermit, ProcessLimit> {
        self.slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| ProcessLimit { limit: self.limit })
    }
}

/// Every upstream process slot is taken: the connection is refused, nothing is started.
#[derive(Debug)]
pub struct ProcessLimit {
    pub limit: usize,
}

impl std::fmt::Display for ProcessLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the proxy runs {} upstream server processes already (limits.max_upstream_processes)",
            self.limit
        )
    }
}

impl std::error::Error for ProcessLimit {}

impl ProcessLimit {
    /// The answer of a request that would have started one more.
    pub fn answer(&self) -> ErrorData {
        limits::reached(
            "max_upstream_processes",
            self.to_string(),
            "Retry once other sessions have ended (DELETE a session you no longer use), or raise limits.max_upstream_processes.",
            Some(std::time::Duration::from_secs(1)),
        )
    }
}

/// A child process's transport holding its slot: the slot is given back when the transport
/// is dropped, which rmcp does after closing it (the process waited for, or killed). Its
/// process group is killed first (fields drop in order): what the server started goes too.
struct Slotted {
    inner: TokioChildProcess,
    _group: upstream_child::Group,
    _slot: OwnedSemaphorePermit,
}

impl Transport<RoleClient> for Slotted {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// How long a request's progress is still relayed after its answer.
const PROGRESS_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Upstream progress tokens (the proxy's own, one per forwarded request) to the front
/// client's.
#[derive(Default)]
pub struct ProgressMap(Mutex<HashMap<ProgressToken, ProgressToken>>);

impl ProgressMap {
    pub fn insert(&self, upstream: ProgressToken, front: ProgressToken) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(upstream, front);
    }
    pub fn remove(&self, upstream: &ProgressToken) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(upstream);
    }

    /// Forgets a request's token a while after its answer: rmcp hands notifications to their
    /// handler in tasks of their own, so progress sent before the answer may be relayed
    /// after it. Tokens are never reused (one per request), so a late removal is harmless.
    pub fn forget_later(self: &Arc<Self>, upstream: ProgressToken) {
        let map = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PROGRESS_GRACE).await;
            map.remove(&upstream);
        });
    }
    fn front_of(&self, upstream: &ProgressToken) -> Option<ProgressToken> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(upstream)
            .cloned()
    }
}

/// The proxy's client side: relays the upstream server's requests and notifications to the
/// front client.
pub struct Relay {
    front: Peer<RoleServer>,
    info: ClientConfig,
    progress: Arc<ProgressMap>,
}

pub type Connection = RunningService<RoleClient, Relay>;

pub async fn connect(
    target: &Target,
    front: Peer<RoleServer>,
    info: ClientConfig,
    progress: Arc<ProgressMap>,
) -> Result<Connection> {
    let relay = Relay {
        front,
        info,
        progress,
    };
    match target {
        Target::Command {
            program,
            args,
            env,
            cwd,
            slots,
        } => {
            let slot = slots.take()?;
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args);
            cmd.envs(env.iter().cloned());
            if let Some(dir) = cwd {
                cmd.current_dir(dir);
            }
            // Tied to the proxy's life: its own process group, killed with the proxy.
            let (child, group) = upstream_child::spawn(cmd)
                .await
                .with_context(|| format!("cannot start the upstream server {program:?}"))?;
            tracing::debug!(pid = child.id(), "upstream server process started");
            let transport = Slotted {
                inner: child,
                _group: group,
                _slot: slot,
            };
            relay
                .serve(transport)
                .await
                .with_context(|| format!("the upstream server {program:?} did not initialize"))
        }
        Target::Url { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                custom.insert(
                    http::HeaderName::try_from(name.as_str())
                        .with_context(|| format!("upstream header name {name:?}"))?,
                    http::HeaderValue::try_from(value.as_str())
                        .with_context(|| format!("upstream header {name} value"))?,
                );
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
            // Each call's upstream key also goes in its POST's Idempotency-Key header.
            let client = KeyedClient::new().context("the HTTP client for the upstream server")?;
            let transport = StreamableHttpClientTransport::with_client(client, config);
            relay
                .serve(transport)
                .await
                .with_context(|| format!("the upstream server at {url} did not initialize"))
        }
    }
}

fn unreachable_front(e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(
            format!("the MCP client behind the proxy could not be reached: {other}"),
            None,
        ),
    }
}

impl Service<RoleClient> for Relay {
    async fn handle_request(
        &self,
        mut request: ServerRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        if let ServerRequest::PingRequest(_) = request {
            return Ok(ClientResult::empty(()));
        }
        *request.get_meta_mut() = context.meta;
        let handle = self
            .front
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await
            .map_err(unreachable_front)?;
        let id = handle.id.clone();
        tokio::select! {
            answer = handle.await_response() => answer.map_err(unreachable_front),
            _ = context.ct.cancelled() => {
                // The server cancelled what it asked: the client is told so too.
                let _ = self.front.notify_cancelled(rmcp::model::CancelledNotificationParam::new(Some(id), Some("cancelled by the upstream server".into()))).await;
                Err(ErrorData::internal_error("cancelled", None))
            }
        }
    }

    async fn handle_notification(
        &self,
        mut notification: ServerNotification,
        context: NotificationContext<RoleClient>,
    ) -> Result<(), ErrorData> {
        if let ServerNotification::ProgressNotification(p) = &mut notification {
            match self.progress.front_of(&p.params.progress_token) {
                Some(front) => p.params.progress_token = front,
                // Progress of a request the front client did not ask progress of.
                None => return Ok(()),
            }
        }
        if let ServerNotification::CancelledNotification(_) = notification {
            // The server cancels its own requests to the client (handled above); a
            // cancellation of a client's request is never sent by a server.
            return Ok(());
        }
        *notification.get_meta_mut() = context.meta;
        self.front
            .send_notification(notification)
            .await
            .map_err(unreachable_front)
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

/// A progress token as the upstream gave it, for logs.
pub fn token_text(t: &ProgressToken) -> String {
    match &t.0 {
        NumberOrString::Number(n) => n.to_string(),
        NumberOrString::String(s) => s.to_string(),
    }
}

/// Forwards a request the proxy does not handle itself, as is (its `_meta` included), and
/// relays the progress it reports; a cancellation from the front client is passed on.
pub async fn forward(
    peer: &Peer<RoleClient>,
    progress: &Arc<ProgressMap>,
    mut request: ClientRequest,
    context: &RequestContext<RoleServer>,
) -> Result<rmcp::model::ServerResult, ErrorData> {
    let front_token = context.meta.get_progress_token();
    *request.get_meta_mut() = context.meta.clone();
    let handle = peer
        .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .map_err(upstream_error)?;
    let token = handle.progress_token.clone();
    if let Some(front) = front_token {
        progress.insert(token.clone(), front);
    }
    let id = handle.id.clone();
    let answer = tokio::select! {
        answer = handle.await_response() => answer.map_err(upstream_error),
        _ = context.ct.cancelled() => {
            cancel_upstream(peer, id).await;
            Err(ErrorData::internal_error("cancelled by the client", None))
        }
    };
    progress.forget_later(token);
    answer
}

pub async fn cancel_upstream(peer: &Peer<RoleClient>, id: rmcp::model::RequestId) {
    let _ = peer
        .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
            Some(id),
            Some("cancelled by the client".into()),
        ))
        .await;
}

/// An upstream failure as the front client is answered: the server's own JSON-RPC error
/// as it sent it, or an error saying the server cannot be reached.
pub fn upstream_error(e: rmcp::ServiceError) -> ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(
            format!("the upstream MCP server cannot be reached: {other}"),
            Some(serde_json::json!({"kind": "upstream_unreachable"})),
        ),
    }
}
