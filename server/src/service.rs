//! The service: decides whether a request is keyed, claims it, and answers duplicates.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{Either, Full};
use pg_idempotency_client::{Begin, BeginOptions, ErrorKind, OnCacheHit, OnMismatch};
use tower_service::Service;
use uuid::Uuid;

use crate::answer;
use crate::body::{buffer, BoxError, RequestBody, ResponseBody, Unread};
use crate::fingerprint;
use crate::key;
use crate::problem::Problem;
use crate::rule::{Presence, Rule};
use crate::run::{run_claimed, Claimed};
use crate::settings::LayerSettings;
use crate::stored::StoredResponse;

/// The layer's service around `S`.
#[derive(Clone)]
pub struct IdempotencyService<S> {
    inner: S,
    settings: Arc<LayerSettings>,
}

impl<S> IdempotencyService<S> {
    pub(crate) fn new(inner: S, settings: Arc<LayerSettings>) -> IdempotencyService<S> {
        IdempotencyService { inner, settings }
    }
}

/// What the layer does with a request before any store call.
enum Admission {
    /// Not the layer's: straight to the handler.
    Pass,
    Refuse(Problem),
    Keyed {
        key: String,
        scope: String,
        route: String,
        rule: Rule,
    },
}

fn admit(s: &LayerSettings, parts: &http::request::Parts) -> Admission {
    if !s.methods.contains(&parts.method) {
        return Admission::Pass;
    }
    // The rule is the route's: the scope function names the route template; a request it
    // cannot name falls under the default rule and is refused below if keyed.
    let scope = (s.scope_of)(parts);
    let rule = scope
        .as_ref()
        .map_or(s.default_rule, |sc| s.rule_for(&sc.route));
    if rule.presence == Presence::Off {
        return Admission::Pass;
    }
    let key = match key::parse_headers(&parts.headers, s.max_key_bytes) {
        Ok(Some(k)) => k,
        Ok(None) if rule.presence == Presence::Required => {
            let route = scope.as_ref().map_or(parts.uri.path(), |sc| &sc.route);
            return Admission::Refuse(Problem::missing_key(route));
        }
        Ok(None) => return Admission::Pass,
        Err(e) => return Admission::Refuse(Problem::bad_key(e)),
    };
    let Some(scope) = scope else {
        return Admission::Refuse(Problem::no_principal());
    };
    Admission::Keyed {
        key,
        scope: scope.store_scope(s.max_scope_bytes),
        route: scope.route,
        rule,
    }
}

type Answer<B, E> = Result<Response<ResponseBody<B>>, E>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for IdempotencyService<S>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Answer<ResBody, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The instance polled ready is the one that serves this request.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let settings = self.settings.clone();
        Box::pin(handle(settings, inner, req))
    }
}

async fn handle<S, ReqBody, ResBody>(
    s: Arc<LayerSettings>,
    mut inner: S,
    req: Request<ReqBody>,
) -> Answer<ResBody, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Send + 'static,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Body<Data = Bytes> + Send + 'static,
    ReqBody::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (parts, body) = req.into_parts();
    let (key, scope, route, rule) = match admit(&s, &parts) {
        Admission::Pass => {
            let req = Request::from_parts(parts, Either::Left(body));
            return Ok(inner.call(req).await?.map(Either::Left));
        }
        Admission::Refuse(p) => return Ok(answer::problem(p)),
        Admission::Keyed {
            key,
            scope,
            route,
            rule,
        } => (key, scope, route, rule),
    };
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body_bytes as u64) {
        return Ok(answer::problem(Problem::body_too_large(s.max_body_bytes)));
    }
    let body = match buffer(body, s.max_body_bytes).await {
        Ok(b) => b,
        Err(Unread::TooLarge) => {
            return Ok(answer::problem(Problem::body_too_large(s.max_body_bytes)))
        }
        Err(Unread::Failed(e)) => {
            tracing::info!(error = %e, "the request body could not be read: 400");
            return Ok(answer::problem(answer::unreadable_body()));
        }
    };
    let request = fingerprint::of(
        &parts.method,
        &route,
        &parts.uri,
        parts.headers.get(http::header::CONTENT_TYPE),
        &body,
    );
    let options = BeginOptions {
        request: Some(request),
        ttl: s.ttl,
        lease: s.lease,
        on_cache_hit: Some(OnCacheHit::ReturnCached),
        on_mismatch: Some(OnMismatch::Reject),
        wait: s.wait,
        claim_token: Some(Uuid::new_v4()),
        // The scope's policy, else pg_idempotency.unresolved_ttl.
        unresolved_ttl: None,
    };
    let begun = begin(&s, &scope, &key, &options).await;
    let unprotected = |why: &dyn std::fmt::Display| {
        tracing::warn!(%scope, %key, error = %why, "idempotency store unreachable: the request runs unprotected (fail_open)");
    };
    match begun {
        Ok(Begin::Claimed(claim)) => {
            let req = Request::from_parts(parts, Either::Right(Full::new(body)));
            let claimed = Claimed {
                settings: s.clone(),
                scope,
                key,
                rule,
                claim,
            };
            // Its own task: a client that goes away does not cancel the handler, and its
            // answer is still recorded.
            match tokio::spawn(run_claimed(claimed, inner, req)).await {
                Ok(answer) => answer,
                Err(e) => {
                    tracing::error!(error = %e, "the task of a claimed request failed");
                    Ok(answer::problem(answer::handler_panicked()))
                }
            }
        }
        Ok(Begin::Replay(replay)) => {
            let Some(stored) = replay.response.as_ref() else {
                tracing::error!(%scope, %key, "the record holds no answer to replay: 500");
                return Ok(answer::problem(answer::unreadable_record()));
            };
            Ok(match StoredResponse::from_json(stored) {
                Ok(stored) => answer::replay(&stored, &s.headers),
                Err(e) => {
                    tracing::error!(%scope, %key, error = %e, "the remembered answer cannot be read back: 500");
                    answer::problem(answer::unreadable_record())
                }
            })
        }
        Ok(Begin::InProgress(running)) => {
            Ok(answer::problem(Problem::in_progress(running.retry_after)))
        }
        Err(e) if e.kind == ErrorKind::Mismatch => {
            Ok(answer::problem(Problem::mismatch(s.mismatch_status)))
        }
        Err(e) if e.kind == ErrorKind::InvalidArgument => {
            // The store's words name its limits and settings: the operator's, in the log.
            tracing::warn!(%scope, error = %e, hint = e.hint().unwrap_or(""), "the idempotency store refused the key or scope: 400");
            Ok(answer::problem(Problem::key_refused()))
        }
        Err(e) if s.fail_open => {
            unprotected(&e);
            let req = Request::from_parts(parts, Either::Right(Full::new(body)));
            Ok(inner.call(req).await?.map(Either::Left))
        }
        Err(e) => {
            tracing::warn!(%scope, error = %e, kind = ?e.kind, hint = e.hint().unwrap_or(""), "idempotency store unreachable or refusing: 503");
            Ok(answer::problem(Problem::store_unavailable(
                s.unavailable_retry_after,
            )))
        }
    }
}

/// `begin`, bounded in time; repeated once with the same claim token when its answer was
/// lost (the repeat gets back a claim the first one made).
async fn begin(
    s: &LayerSettings,
    scope: &str,
    key: &str,
    options: &BeginOptions,
) -> pg_idempotency_client::Result<Begin> {
    let limit = s.wait + s.store_timeout;
    let once = || async {
        match tokio::time::timeout(limit, s.store.begin(scope, key, options)).await {
            Ok(answer) => answer,
            Err(_) => Err(pg_idempotency_client::Error::new(
                ErrorKind::Timeout,
                format!("the store did not answer within {limit:?}"),
            )),
        }
    };
    match once().await {
        Err(e) if e.outcome_unknown() => once().await,
        answer => answer,
    }
}
