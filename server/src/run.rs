//! A claimed request: the handler runs in a task of its own under a lease heartbeat, and
//! its answer is remembered or the claim given up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full};
use pg_idempotency_client::{ErrorKind, State};
use tower_service::Service;

use crate::answer;
use crate::body::{BoxError, RequestBody, ResponseBody};
use crate::claim::RequestClaim;
use crate::outcome::{fate, Fate, Why};
use crate::rule::Rule;
use crate::settings::LayerSettings;
use crate::stored::StoredResponse;

/// A request this attempt holds the key of.
pub(crate) struct Claimed {
    pub settings: Arc<LayerSettings>,
    pub scope: String,
    pub key: String,
    pub rule: Rule,
    pub claim: pg_idempotency_client::Claim,
}

/// The heartbeat's period: a third of the lease, so that two beats may fail before it
/// lapses.
fn beat_every(lease_until: SystemTime) -> Duration {
    let left = lease_until
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    (left / 3).max(Duration::from_millis(20))
}

pub(crate) async fn run_claimed<S, ReqBody, ResBody>(
    c: Claimed,
    mut inner: S,
    mut req: Request<RequestBody<ReqBody>>,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<RequestBody<ReqBody>>, Response = Response<ResBody>> + Send + 'static,
    S::Error: Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let in_transaction = Arc::new(AtomicBool::new(false));
    req.extensions_mut().insert(RequestClaim {
        scope: c.scope.clone(),
        key: c.key.clone(),
        fence: c.claim.fence,
        attempt: c.claim.attempt,
        recovered: c.claim.recovered,
        upstream_key: c.claim.upstream_key,
        rule: c.rule,
        in_transaction: in_transaction.clone(),
        headers: c.settings.headers.clone(),
        schema: c.settings.store.api_schema().cloned(),
        mode: c.settings.store.statement_mode().unwrap_or_default(),
    });
    // A task of its own again, so that a panic ends it and not this one: the claim is
    // released either way.
    let mut handler = tokio::spawn(inner.call(req));
    // The first beat one period from now. (An interval's immediate first tick is no
    // cheaper to skip by awaiting it: tokio's timer fires an elapsed deadline only on its
    // next millisecond, which cost every request about a millisecond.)
    let every = beat_every(c.claim.lease_until);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let joined = loop {
        tokio::select! {
            joined = &mut handler => break joined,
            _ = beat.tick() => heartbeat(&c).await,
        }
    };
    let resp = match joined {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            release(&c, Why::HandlerFailed).await;
            return Err(e);
        }
        Err(e) => {
            tracing::error!(scope = %c.scope, key = %c.key, error = %e, "the handler panicked");
            release(&c, Why::HandlerPanicked).await;
            return Ok(answer::problem(answer::handler_panicked()));
        }
    };
    if in_transaction.load(Ordering::SeqCst) {
        settle_transaction(&c).await;
        return Ok(resp.map(Either::Left));
    }
    let (parts, body) = resp.into_parts();
    let (succeeded, cache_failure) = match fate(parts.status, &parts.headers, &c.rule) {
        Fate::Succeeded => (true, None),
        Fate::CachedFailure => (false, Some(true)),
        Fate::Released(why) => {
            release(&c, why).await;
            return Ok(Response::from_parts(parts, Either::Left(body)));
        }
    };
    let fits = body
        .size_hint()
        .exact()
        .is_some_and(|n| n <= c.settings.max_response_bytes as u64);
    if !fits {
        tracing::info!(scope = %c.scope, key = %c.key, "a streamed or oversized answer is forwarded and not remembered");
        release(&c, Why::NotBuffered).await;
        return Ok(Response::from_parts(parts, Either::Left(body)));
    }
    let collected = body
        .collect()
        .await
        .map_err(|e| Into::<BoxError>::into(e).to_string());
    let bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(broke) => {
            tracing::warn!(scope = %c.scope, key = %c.key, error = %broke, "the handler's answer broke off: 502");
            release(&c, Why::HandlerFailed).await;
            return Ok(answer::problem(answer::answer_broke()));
        }
    };
    // Filtered here, before the store sees it: what is not replayed is never stored.
    let stored = StoredResponse::capture(&parts, bytes.clone(), &c.settings.headers);
    complete(&c, &stored, succeeded, cache_failure).await;
    Ok(Response::from_parts(parts, Either::Right(Full::new(bytes))))
}

async fn heartbeat(c: &Claimed) {
    let s = &c.settings;
    if let Err(e) = s
        .store
        .extend(&c.scope, &c.key, c.claim.fence, s.lease)
        .await
    {
        tracing::warn!(scope = %c.scope, key = %c.key, error = %e, "the lease of a running request could not be extended");
    }
}

/// Remembers the answer; a failure to do so is logged, never the caller's error: the work
/// is done and its answer goes out (a retry may then run it again).
async fn complete(c: &Claimed, stored: &StoredResponse, succeeded: bool, cache: Option<bool>) {
    let json = stored.to_json();
    let once = || {
        c.settings.store.complete(
            &c.scope,
            &c.key,
            c.claim.fence,
            Some(&json),
            succeeded,
            cache,
        )
    };
    // Completing again with the same fence is harmless: it keeps what the first one stored.
    let done = match once().await {
        Err(e) if e.outcome_unknown() => once().await,
        other => other,
    };
    if let Err(e) = done {
        tracing::warn!(scope = %c.scope, key = %c.key, error = %e, kind = ?e.kind, "the answer was sent but could not be remembered");
    }
}

async fn release(c: &Claimed, why: Why) {
    tracing::debug!(scope = %c.scope, key = %c.key, ?why, "claim released");
    if let Err(e) = c
        .settings
        .store
        .release(&c.scope, &c.key, c.claim.fence)
        .await
    {
        // Its lease lapsed and another attempt took over (LeaseLost), or the store is
        // unreachable: the lease lapses on its own.
        tracing::warn!(scope = %c.scope, key = %c.key, error = %e, kind = ?e.kind, "the claim could not be released");
    }
}

/// The handler completed the call in its own transaction: a commit left the record
/// completed by this fence; a rollback left it running under this fence, and it is
/// released so that a retry runs the call again.
async fn settle_transaction(c: &Claimed) {
    match c.settings.store.lookup(&c.scope, &c.key).await {
        Ok(Some(r)) if r.fence == c.claim.fence && r.state == State::InProgress => {
            release(c, Why::RolledBack).await
        }
        Ok(_) => {}
        Err(e) if e.kind == ErrorKind::LeaseLost => {}
        Err(e) => {
            tracing::warn!(scope = %c.scope, key = %c.key, error = %e, "could not tell whether the handler's transaction committed its completion");
        }
    }
}
