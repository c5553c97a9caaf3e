//! A deduplicated `tools/call`: its key and scope, the settings it runs with, and the
//! answer the MCP client gets for each way it can end.

use std::sync::Arc;

use pg_idempotency_client::{
    Call, Dispatched, Error, ErrorKind, Fingerprint, Idempotent, KeyStrategy, OnUnknownOutcome,
};
use rmcp::model::{CallToolRequestParams, CallToolResponse, ErrorData, ServerResult};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleClient, RoleServer};
use serde_json::{json, Value};

use crate::answer::{self, code, How, Marked, ProxyError};
use crate::forward_tool::{FirstAnswer, Forwarding, Passed};
use crate::key::{self, Key};
use crate::policy::{Policy, Unknown};
use crate::proxy::Proxy;
use crate::reconcile;
use crate::scope::scope_of;
use crate::upstream::ProgressMap;
use crate::waiters;

pub struct Upstream<'a> {
    pub peer: &'a Peer<RoleClient>,
    pub progress: &'a Arc<ProgressMap>,
}

pub async fn deduplicated(
    proxy: &Proxy,
    up: Upstream<'_>,
    params: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    principal: &str,
    header_key: Option<&str>,
    policy: &Policy,
) -> Result<CallToolResponse, ErrorData> {
    let name = params.name.to_string();
    let arguments = Value::Object(params.arguments.clone().unwrap_or_default());
    let chosen = key::choose(
        &context.meta.0 .0,
        header_key,
        policy.strategy,
        policy.key_field.as_deref(),
        &arguments,
    )
    .map_err(|e| answer::invalid_params(e.message, e.hint))?;
    let scope = scope_of(&proxy.server, &name, principal);
    let (key, fingerprint) = match chosen {
        Key::None => {
            // `strategy = "uuid"` and no key named: nothing to deduplicate on.
            let result = crate::upstream::forward(
                up.peer,
                up.progress,
                rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
                    params,
                )),
                context,
            )
            .await?;
            return response_of(result);
        }
        Key::Client { key, .. } => (key, Fingerprint::WholeInput),
        Key::Field(key) => (key, Fingerprint::ByStrategy),
        Key::HashInput => {
            let hash = pg_idempotency_canon::hash_value(&arguments).map_err(|e| {
                answer::invalid_params(
                    format!("the arguments have no canonical JSON form: {e}"),
                    "Send arguments that are valid JSON (no lone surrogates).".into(),
                )
            })?;
            (pg_idempotency_canon::key_of(&hash), Fingerprint::WholeInput)
        }
    };
    let dispatcher = proxy.dispatcher_for(&scope).map_err(|e| {
        tracing::error!(tool = %name, scope, error = %e, "the scope could not be registered");
        ErrorData::internal_error(
            "the proxy could not take the call",
            Some(json!({"kind": "proxy_error", "hint": "The call was not sent upstream; the proxy's log says why."})),
        )
    })?;
    let (first, first_answer) = FirstAnswer::new();
    let forwarding = Forwarding {
        peer: up.peer.clone(),
        progress: up.progress.clone(),
        name: name.clone(),
        meta: context.meta.clone(),
        cancelled: context.ct.clone(),
        max_result_bytes: policy.max_result_bytes,
        oversize: policy.oversize,
        first,
    };
    let settings = settings(policy, &key, fingerprint, up.peer);
    let call = Call::new().idempotent(settings).extension(forwarding);
    // As the principal's: the waiters' gate caps its duplicates that wait (waiters.rs).
    // On a task of its own, so that it goes on recording once the first caller is answered.
    let mut dispatch = tokio::spawn({
        let (scope, principal) = (scope.clone(), principal.to_string());
        async move {
            waiters::as_principal(
                &principal,
                dispatcher.dispatch_call(&scope, arguments, call),
            )
            .await
        }
    });
    let mark = |how| Marked {
        scope: &scope,
        key: Some(&key),
        how,
    };
    // If the call runs here, the server's own answer goes to the client as soon as it
    // comes, and its recording ends in the background (recordings.rs): a duplicate arriving
    // meanwhile waits for the record. (The answer is sent before the tool returns, so once
    // the dispatch has ended it is there to be taken first.)
    let (dispatched, capped) = tokio::select! {
        biased;
        Ok(passed) = first_answer => {
            let (name, scope, key) = (name.clone(), scope.clone(), key.clone());
            proxy.recordings.spawn(async move {
                if let Ok((Err(e), _)) = dispatch.await {
                    // Logged for the operator; the client has its answer.
                    let _ = failed(e, &name, &scope, &key);
                }
            });
            return match passed {
                Passed::Result(result) => match *result {
                    ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(
                        answer::marked(r, mark(How::Ran)),
                    )),
                    other => response_of(other),
                },
                Passed::Error(e) => Err(e),
            };
        }
        ended = &mut dispatch => ended.map_err(|e| {
            tracing::error!(tool = %name, scope, error = %e, "a call's dispatch ended in a panic");
            ErrorData::internal_error(
                format!("the proxy could not complete this {name} call"),
                Some(json!({"kind": "proxy_error", "hint": "Retry the call with the same key; the proxy's operator finds the cause in its log."})),
            )
        })?,
    };
    match dispatched {
        Ok(Dispatched::Ran(v)) => Ok(complete(&v, mark(How::Ran))?),
        Ok(Dispatched::Replayed(v)) => Ok(complete(&v, mark(How::Replayed))?),
        Ok(Dispatched::InProgress { retry_after }) => Err(ProxyError {
            code: code::IN_PROGRESS,
            kind: "in_progress",
            message: format!("another attempt of this {name} call is running"),
            detail: Some(waiters::in_progress_detail(capped, policy.wait)),
            hint: Some("Retry with the same key after retryAfterMs: the retry gets the first attempt's result.".into()),
            retry_after: Some(retry_after),
            scope: Some(&scope),
            key: Some(&key),
        }
        .into_error()),
        Err(e) => failed(e, &name, &scope, &key),
    }
}

/// The settings a call runs with: the policy's, with the key the proxy chose.
fn settings(
    policy: &Policy,
    key: &str,
    fingerprint: Fingerprint,
    peer: &Peer<RoleClient>,
) -> Idempotent {
    let key = key.to_string();
    let mut idem = Idempotent::new()
        .strategy(KeyStrategy::explicit(move |_| Some(key.clone())))
        .fingerprint(fingerprint)
        .wait(policy.wait);
    idem.ttl = policy.ttl;
    idem.lease = policy.lease;
    idem.on_cache_hit = policy.on_cache_hit;
    idem.cache_failures = policy.cache_failures;
    idem.on_mismatch = policy.on_mismatch;
    idem.on_unknown_outcome = Some(match &policy.on_unknown_outcome {
        Unknown::Rerun => OnUnknownOutcome::Rerun,
        Unknown::Refuse => OnUnknownOutcome::Refuse,
        Unknown::Reconcile(rule) => {
            let (peer, rule) = (peer.clone(), rule.clone());
            return idem.reconcile(move |call| reconcile::read(peer.clone(), rule.clone(), call));
        }
    });
    idem
}

fn complete(stored: &Value, m: Marked<'_>) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResponse::Complete(answer::marked(
        answer::result_of(stored)?,
        m,
    )))
}

fn response_of(result: ServerResult) -> Result<CallToolResponse, ErrorData> {
    match result {
        ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
        ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
        ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
        other => Err(ErrorData::internal_error(
            format!("the upstream server answered tools/call with {other:?}"),
            None,
        )),
    }
}

/// A dispatch that did not end in a result. The client is told what it can act on: a
/// stable code and kind, what became of its call, and what to do. What the store or the
/// client crate said (database text, stored fingerprints, the upstream's address in a
/// mark's reason) goes to the operator's log only: it would tell a tenant about the
/// database, the upstream and other requests.
fn failed(e: Error, name: &str, scope: &str, key: &str) -> Result<CallToolResponse, ErrorData> {
    let how = if e.replayed() {
        How::Replayed
    } else {
        How::Ran
    };
    let m = Marked {
        scope,
        key: Some(key),
        how,
    };
    let error = |code: i32, kind: &str, message: String, detail: Option<&str>, hint: &str| {
        // The store's message, its detail and its hint once each (the error's own
        // rendering repeats its detail); a hint in SQL's spelling is told in the proxy's.
        tracing::warn!(
            tool = name,
            scope,
            key,
            kind,
            error = %e.message,
            detail = e.detail(),
            hint = operator_hint(&e),
            "a call refused"
        );
        Err(ProxyError {
            code,
            kind,
            message,
            detail: detail.map(str::to_string),
            hint: Some(hint.to_string()),
            retry_after: e.retry_after(),
            scope: Some(scope),
            key: Some(key),
        }
        .into_error())
    };
    match e.kind {
        // The tool's `isError` result, from this run or remembered.
        ErrorKind::ToolFailed if e.response().is_some() => complete(e.response().unwrap(), m),
        ErrorKind::Mismatch => error(
            code::KEY_REUSED,
            "key_reused",
            format!("this {name} call's key was used before with other arguments"),
            Some("The record under this key was made by a call with other arguments. This call was not sent upstream."),
            MISMATCH_HINT,
        ),
        ErrorKind::RepeatRefused => error(
            code::FAILED_BEFORE,
            "failed_before",
            format!("this {name} call failed before, and the tool answers repeats of a failure with an error"),
            None,
            "Use a new key to run the call again (on_cache_hit = \"fail_fast\" for this tool).",
        ),
        ErrorKind::OutcomeUnknown => error(
            code::OUTCOME_UNKNOWN,
            "outcome_unknown",
            format!("an earlier attempt of this {name} call may have acted, and its outcome is unknown: it was not run again"),
            Some("An earlier attempt's holder stopped before it recorded an outcome (the proxy or the server died, or lost its records), and this tool's on_unknown_outcome does not run such a call again (refuse, the default unless the tool is annotated idempotentHint: true, or a reconcile read that could not tell). The record is kept, unresolved: every retry with this key gets this answer until an operator resolves it, or pg_idempotency.unresolved_ttl (7 days by default) passes."),
            "Do not send the call again under another key until you know whether it acted: look where the tool acts, or ask the proxy's operator, who finds the record in idem_unresolved() by this scope and key and settles it with idem_resolve (succeeded with the result found, or release to let it run again).",
        ),
        // The effect happened, and its result exists: the client gets it, marked as run now
        // or, handed on from the holder this call joined, as a replay.
        ErrorKind::Unrecorded | ErrorKind::LeaseLost if e.response().is_some() => {
            tracing::warn!(tool = name, scope, error = %e, "the result is passed on, but not recorded");
            complete(e.response().unwrap(), m)
        }
        ErrorKind::Unrecorded => error(
            code::UNRECORDED,
            "unrecorded",
            format!("this {name} call ran, but its result could not be recorded"),
            None,
            "The effect happened: do not run the call again by other means; look its result up where the tool acted.",
        ),
        // A busy pool is the proxy's own limit, so the tenant is told its name (split_store.rs
        // words the error; nothing of the database's is in it).
        ErrorKind::Pool => {
            tracing::error!(tool = name, scope, error = %e, detail = e.detail(), "no connection of the pool came free: the call was not sent");
            error(
                code::STORE_UNAVAILABLE,
                "store_unavailable",
                "the proxy's records cannot be reached: the call was not sent upstream".into(),
                Some("No connection of the proxy's pool to its records came free within limits.pool_wait_timeout."),
                "Retry the call in a moment with the same key; it did not run. If this persists, the proxy's operator raises [database] pool_size or limits.pool_wait_timeout.",
            )
        }
        ErrorKind::Database
        | ErrorKind::NotInstalled
        | ErrorKind::NotPermitted
        | ErrorKind::GrantRoleCaller
        | ErrorKind::Contention
        | ErrorKind::Timeout => {
            tracing::error!(tool = name, scope, error = %e, detail = e.detail(), "the store cannot be reached: the call was not sent");
            error(
                code::STORE_UNAVAILABLE,
                "store_unavailable",
                "the proxy's records cannot be reached: the call was not sent upstream".into(),
                None,
                "Retry the call later with the same key; it did not run. The proxy's operator finds the cause in its log.",
            )
        }
        ErrorKind::InvalidArgument | ErrorKind::Uncanonicalizable | ErrorKind::ResponseTooLarge => {
            Err(ErrorData::invalid_params(
                e.to_string(),
                Some(json!({"kind": "invalid", "detail": e.detail(), "hint": e.hint()})),
            ))
        }
        _ => {
            tracing::error!(tool = name, scope, error = %e, detail = e.detail(), "a call ended in an error of the proxy");
            Err(ErrorData::internal_error(
                format!("the proxy could not complete this {name} call"),
                Some(json!({"kind": "proxy_error", "hint": "Retry the call with the same key; the proxy's operator finds the cause in its log."})),
            ))
        }
    }
}

/// What a tenant whose key was reused is told to do, in the proxy's own words: the store's
/// hint names the SQL API's argument (`on_mismatch => 'ignore'`), not the proxy's setting.
pub const MISMATCH_HINT: &str = "Use a new key for a new call; repeat the first call's arguments to get its result. If only some arguments name the call, the proxy's operator sets on_mismatch = \"ignore\" in the tool's [tools.<name>] policy, and a repeat gets the first call's result.";

/// The hint the operator's log shows for a refusal: the store's, except where it names
/// the SQL API's arguments, which the proxy's configuration spells otherwise.
fn operator_hint(e: &Error) -> Option<&str> {
    match e.kind {
        ErrorKind::Mismatch => Some(MISMATCH_HINT),
        _ => e.hint(),
    }
}
