//! The HTTP front's sessions: rmcp's in-memory session manager, with what it lacks for a
//! front several tenants share. Each session belongs to the principal that initialized it,
//! and a request naming it for anyone else is answered 404, as for a session that does not
//! exist (no oracle, nothing reaches the session). Sessions are bounded in number, per
//! principal (429) and in all (503). A session that never called a tool is ended after a
//! short idle time; every session after a longer one (rmcp's keep-alive). Ending a session
//! ends its upstream connection, and with it a stdio server's process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, ServerSseMessage, SessionId, SessionManager,
};
use rmcp::RoleServer;

use crate::limits::Limits;
use crate::principal::Principal;

/// The header that names a session (the MCP specification's).
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The session manager given to rmcp's `StreamableHttpService`, and the state the front's
/// guard ([`guard`]) checks each request against.
pub struct Sessions {
    local: LocalSessionManager,
    registry: Mutex<Registry>,
    max_sessions: usize,
    max_per_principal: usize,
    idle_before_first_call: Duration,
}

/// Live sessions and the places reserved for sessions being initialized: a place is taken
/// before rmcp creates a session, so that concurrent `initialize`s cannot overshoot a cap.
#[derive(Default)]
struct Registry {
    live: HashMap<SessionId, Entry>,
    /// Live sessions and reserved places, per principal.
    held: HashMap<String, usize>,
    /// The same, all principals together.
    total: usize,
}

struct Entry {
    principal: String,
    usage: Arc<Usage>,
}

/// When a session was last asked something, and whether it ever called a tool.
#[derive(Debug)]
pub struct Usage {
    last: Mutex<Instant>,
    called_tool: AtomicBool,
}

impl Usage {
    fn new() -> Usage {
        Usage {
            last: Mutex::new(Instant::now()),
            called_tool: AtomicBool::new(false),
        }
    }
    fn touch(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
    fn idle_for(&self) -> Duration {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

/// A session's usage, in the extensions of each request made in it: the session's handler
/// marks a tool call there (see [`tool_called`]).
#[derive(Debug, Clone)]
pub struct SessionUsage(Arc<Usage>);

/// The handler of a `tools/call` says the session is in use.
pub fn tool_called(context: &RequestContext<RoleServer>) {
    if let Some(usage) = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<SessionUsage>())
    {
        usage.0.called_tool.store(true, Ordering::Relaxed);
    }
}

impl Sessions {
    /// The manager, and the task that ends sessions idle too long without a tool call.
    pub fn start(limits: &Limits) -> Arc<Sessions> {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(limits.session_idle_timeout);
        let sessions = Arc::new(Sessions {
            local,
            registry: Mutex::default(),
            max_sessions: limits.max_sessions.get(),
            max_per_principal: limits.max_sessions_per_principal.get(),
            idle_before_first_call: limits.idle_before_first_call,
        });
        tokio::spawn(end_unused(Arc::downgrade(&sessions)));
        sessions
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's usage if it is live and `principal`'s; `None` for anything else.
    fn owned(&self, id: &str, principal: &str) -> Option<Arc<Usage>> {
        let registry = self.registry();
        let entry = registry.live.get(id)?;
        (entry.principal == principal).then(|| entry.usage.clone())
    }

    /// A place for a new session of `principal`, or which cap refuses it.
    fn reserve(self: &Arc<Self>, principal: &str) -> Result<Reservation, Refused> {
        let mut registry = self.registry();
        let held = registry.held.get(principal).copied().unwrap_or(0);
        if held >= self.max_per_principal {
            tracing::warn!(principal, held, "a session refused: the principal's sessions are at limits.max_sessions_per_principal");
            return Err(Refused::PerPrincipal(held));
        }
        if registry.total >= self.max_sessions {
            tracing::warn!(
                total = registry.total,
                "a session refused: the proxy's sessions are at limits.max_sessions"
            );
            return Err(Refused::Global);
        }
        *registry.held.entry(principal.to_string()).or_default() += 1;
        registry.total += 1;
        Ok(Reservation {
            sessions: self.clone(),
            principal: Some(principal.to_string()),
        })
    }

    /// The answer of an `initialize` a cap refuses: a place may free up once an unused
    /// session is ended, hence `Retry-After`.
    fn refusal(&self, refused: Refused) -> Response {
        let retry = self.idle_before_first_call;
        match refused {
            Refused::PerPrincipal(held) => refusal(
                StatusCode::TOO_MANY_REQUESTS,
                "max_sessions_per_principal",
                &format!("This principal has {held} live sessions, the most it may hold. End one you no longer use (DELETE it), or retry later."),
                retry,
            ),
            Refused::Global => refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "max_sessions",
                "The proxy holds as many sessions as it may. Retry later.",
                retry,
            ),
        }
    }

    /// The session rmcp created on a reserved place becomes live, bound to its principal.
    async fn bind(&self, mut place: Reservation, id: SessionId) {
        let Some(principal) = place.principal.take() else {
            return;
        };
        self.registry().live.insert(
            id.clone(),
            Entry {
                principal,
                usage: Arc::new(Usage::new()),
            },
        );
        // The session may have ended already (its upstream could not be reached): then it
        // is forgotten here too. rmcp forgets a session before telling `close_session`, so
        // whichever runs last leaves the registry right.
        if !self.local.has_session(&id).await.unwrap_or(false) {
            self.forget(&id);
        }
    }

    fn forget(&self, id: &SessionId) {
        let mut registry = self.registry();
        if let Some(entry) = registry.live.remove(id) {
            registry.release(&entry.principal);
        }
    }

    /// Sessions that never called a tool and have been idle for too long.
    fn unused(&self) -> Vec<SessionId> {
        self.registry()
            .live
            .iter()
            .filter(|(_, e)| {
                !e.usage.called_tool.load(Ordering::Relaxed)
                    && e.usage.idle_for() >= self.idle_before_first_call
            })
            .map(|(id, _)| id.clone())
            .collect()
    }
}

impl Registry {
    fn release(&mut self, principal: &str) {
        if let Some(n) = self.held.get_mut(principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.held.remove(principal);
            }
        }
        self.total = self.total.saturating_sub(1);
    }
}

/// The cap an `initialize` ran into.
enum Refused {
    /// The principal's own, with the sessions it holds.
    PerPrincipal(usize),
    Global,
}

/// A place taken for a session being initialized; given back unless the session is bound.
struct Reservation {
    sessions: Arc<Sessions>,
    principal: Option<String>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.principal.take() {
            self.sessions.registry().release(&p);
        }
    }
}

/// Ends the sessions that never called a tool once they have been idle for
/// `limits.idle_before_first_call`; it stops with the front.
async fn end_unused(sessions: Weak<Sessions>) {
    let period = match sessions.upgrade() {
        Some(s) => {
            (s.idle_before_first_call / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
        }
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        for id in sessions.unused() {
            tracing::info!(session = %id, "ending a session that called no tool within limits.idle_before_first_call");
            if let Err(e) = sessions.close_session(&id).await {
                tracing::warn!(session = %id, error = %e, "an unused session could not be ended");
            }
        }
    }
}

/// A JSON answer of the front that refuses a request for a limit.
fn refusal(status: StatusCode, limit: &str, hint: &str, retry_after: Duration) -> Response {
    let body = serde_json::json!({
        "error": "limit_reached",
        "limit": format!("limits.{limit}"),
        "hint": hint,
    });
    let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (header::RETRY_AFTER, HeaderValue::from(seconds)),
        ],
        body.to_string(),
    )
        .into_response()
}

/// The answer for a session id that is not one of the caller's: unknown, ended, or
/// another principal's, all alike.
fn session_not_found() -> Response {
    let body = serde_json::json!({
        "error": "session_not_found",
        "hint": "This session does not exist or has ended: start a new one (initialize without an Mcp-Session-Id header).",
    });
    (
        StatusCode::NOT_FOUND,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// The front's check of every request before rmcp sees it: a session id must be one of
/// the caller's own; a request that may create a session must find a place for it.
pub async fn guard(
    State(sessions): State<Arc<Sessions>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(Principal(principal)) = request.extensions().get::<Principal>().cloned() else {
        // The authentication layer names every request's principal before this one.
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "a request without a principal",
        )
            .into_response();
    };
    if let Some(id) = request.headers().get(SESSION_HEADER) {
        let Some(usage) = id
            .to_str()
            .ok()
            .and_then(|id| sessions.owned(id, &principal))
        else {
            return session_not_found();
        };
        usage.touch();
        request.extensions_mut().insert(SessionUsage(usage));
        return next.run(request).await;
    }
    if request.method() != Method::POST {
        // rmcp answers a GET or DELETE without a session id itself (400).
        return next.run(request).await;
    }
    // An `initialize` (or a request rmcp refuses): a place first, bound if a session came.
    let place = match sessions.reserve(&principal) {
        Ok(place) => place,
        Err(refused) => return sessions.refusal(refused),
    };
    let response = next.run(request).await;
    if let Some(id) = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        sessions.bind(place, SessionId::from(id)).await;
    }
    response
}

/// rmcp's session manager, told when a session ends (a DELETE, an idle session, an
/// upstream gone), so that the registry forgets it.
impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.local.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.local.close_session(id).await;
        self.forget(id);
        closed
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl std::future::Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.local.create_stream(id, message)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.local.accept_message(id, message).await
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl std::future::Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.local.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl std::future::Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.local.resume(id, last_event_id)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.local.event_store()
    }
}
