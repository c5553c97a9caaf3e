//! A claimed call, run to the end: the tool in a task of its own, the lease kept while it
//! runs, and its result recorded under the claim's fence, retried until the store takes it.
//!
//! The holder is a task apart from the dispatch that started it, so that a result that
//! exists is never thrown away: if the dispatch gives up (its timeout) after the tool
//! returned, the holder goes on recording in the background. If it gives up before, the
//! tool is stopped with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::error::{Error, ErrorKind};
use crate::idempotent::{Reconcile, ReconcileFn, Reconciled};
use crate::lease::{Keeper, LeaseState, LeaseWatch};
use crate::live_holders::Registration;
use crate::marks::Mark;
pub(crate) use crate::ran::Ran;
use crate::store::IdempotencyStore;
use crate::tool::{CallContext, FailureRecord, Tool};
use crate::types::Claim;

/// What the holder does with its claim.
pub(crate) enum Plan {
    Run,
    /// A takeover: the earlier attempt may have acted. Refuse (with why), or ask the read.
    Refuse(String),
    Reconcile(ReconcileFn),
}

/// What became of the result.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// Stored under the fence.
    Yes,
    /// The fence no longer holds the record: nothing was stored.
    LeaseLost,
    /// The result cannot be stored (too large, U+0000): a mark was stored in its place, so
    /// that every retry learns the effect happened (`marks::Mark::Unrecorded`).
    Unstorable(Error),
    /// The record expired while the store could not be reached.
    Expired,
    /// Left to lapse on purpose: the tool failed without knowing whether its effect
    /// happened (`FailureRecord::Abandon`).
    Abandoned,
}

/// What the holder owns.
pub(crate) struct Held {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) scope: String,
    pub(crate) key: String,
    pub(crate) claim: Claim,
    pub(crate) lease: Option<Duration>,
    pub(crate) cache_failures: Option<bool>,
    /// Its entry among this process's live holders (`live_holders`): calls of the same
    /// record in this process join this holder while it lives. Dropped with the holder.
    pub(crate) live: Option<Registration>,
}

/// The dispatch's side of a running holder.
pub(crate) struct Running {
    /// The tool's result, as soon as it returned.
    pub(crate) ran: oneshot::Receiver<Ran>,
    /// What became of it, once recorded (or given up on).
    pub(crate) recorded: oneshot::Receiver<Recorded>,
    /// What the holder knows of its lease, for what the dispatch tells its caller.
    pub(crate) lease: LeaseWatch,
    guard: StopUnlessRan,
}

impl Running {
    /// Lets the holder go on in the background (it stops on its own once the result is
    /// recorded), or stops it now if the tool has not returned yet.
    pub(crate) fn abandon(self) {
        drop(self.guard)
    }
}

/// Stops the holder (and the tool with it) when the dispatch is dropped before the tool
/// returned; after that, the holder finishes recording on its own.
struct StopUnlessRan {
    task: tokio::task::AbortHandle,
    ran: Arc<AtomicBool>,
}

impl Drop for StopUnlessRan {
    fn drop(&mut self) {
        if !self.ran.load(Ordering::SeqCst) {
            self.task.abort();
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the holder of `held`'s claim: runs `tool` with `input` and records its result.
pub(crate) fn start(
    held: Held,
    plan: Plan,
    tool: Arc<dyn Tool>,
    input: Value,
    mut ctx: CallContext,
) -> Running {
    let (ran_tx, ran_rx) = oneshot::channel();
    let (recorded_tx, recorded_rx) = oneshot::channel();
    let ran = Arc::new(AtomicBool::new(false));
    let (lease_tx, lease_rx) = watch::channel(LeaseState::Held);
    ctx.fence = Some(held.claim.fence);
    ctx.lease = LeaseWatch::new(lease_rx.clone());
    let lease_watch = LeaseWatch::new(lease_rx.clone());
    let length = held
        .claim
        .lease_until
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::from_secs(1));
    let keeper = Keeper {
        store: held.store.clone(),
        scope: held.scope.clone(),
        key: held.key.clone(),
        fence: held.claim.fence,
        lease: held.lease,
        length: held.lease.unwrap_or(length),
        tx: lease_tx,
    };
    let held_until = Instant::now() + length;
    let flag = ran.clone();
    let task = tokio::spawn(async move {
        // The heartbeat beats in this task, beside the work; the tool runs in a task of its
        // own (`run_tool`), so a tool that blocks its thread does not stop the heartbeat on
        // a multi-threaded runtime.
        let heartbeat = keeper.run(held_until);
        tokio::pin!(heartbeat);
        let work = async move {
            let result = match plan {
                Plan::Run => run_tool(&held.scope, tool, input, ctx).await,
                Plan::Refuse(why) => Ran::Refused(why),
                Plan::Reconcile(read) => {
                    let call = Reconcile {
                        input: input.clone(),
                        key: held.key.clone(),
                        upstream_key: held.claim.upstream_key,
                        attempt: held.claim.attempt,
                    };
                    match read(call).await {
                    Ok(Reconciled::Found(v)) => Ran::Found(v),
                    Ok(Reconciled::NotFound) => run_tool(&held.scope, tool, input, ctx).await,
                    Ok(Reconciled::Unknown) => Ran::Refused(
                        "an earlier attempt may have performed the effect, and the reconcile read could not tell".into(),
                    ),
                    Err(e) => Ran::Refused(format!(
                        "an earlier attempt may have performed the effect, and the reconcile read failed: {}",
                        e.message
                    )),
                }
                }
            };
            flag.store(true, Ordering::SeqCst);
            if let Some(live) = &held.live {
                live.ran(&result);
            }
            let _ = ran_tx.send(result.clone());
            let recorded = record(&held, &result, &LeaseWatch::new(lease_rx)).await;
            if let Recorded::Expired = recorded {
                tracing::error!(scope = %held.scope, fence = held.claim.fence, "the result was never recorded: the store could not be reached until the record expired");
            }
            recorded
        };
        tokio::pin!(work);
        let mut beating = true;
        let recorded = loop {
            tokio::select! {
                recorded = &mut work => break recorded,
                // The heartbeat ends only when the store refused the fence.
                _ = &mut heartbeat, if beating => beating = false,
            }
        };
        let _ = recorded_tx.send(recorded);
    });
    Running {
        ran: ran_rx,
        recorded: recorded_rx,
        lease: lease_watch,
        guard: StopUnlessRan {
            task: task.abort_handle(),
            ran,
        },
    }
}

/// Runs the tool in a task of its own, so that a panic is its result rather than the
/// holder's end.
async fn run_tool(scope: &str, tool: Arc<dyn Tool>, input: Value, ctx: CallContext) -> Ran {
    let run = tokio::spawn(async move { tool.call_with(input, ctx).await });
    let _run = AbortOnDrop(run.abort_handle());
    match run.await {
        Ok(Ok(v)) => Ran::Ok(v),
        Ok(Err(e)) => Ran::Failed(e),
        Err(join) => {
            let message = format!("tool {scope} panicked");
            tracing::error!(error = %join, "{message}");
            Ran::Panicked(message)
        }
    }
}

/// Records `result` under the claim's fence, trying again (with backoff) while the store
/// cannot be reached: a repeat with the same fence is safe (the store answers the state it
/// recorded). Never after the store refused the fence, and never past the record's expiry.
async fn record(held: &Held, result: &Ran, lease: &LeaseWatch) -> Recorded {
    let cache_failures = match result {
        Ran::Failed(e) => match e.record {
            // A failure that says the lease is not held (`ctx.ensure_lease()?`, or a tool's
            // own error of that kind) stopped before the effect: the call never ran, so it
            // is released, never remembered as failed (a `FAIL_FAST` retry would be refused
            // until the ttl ends). Released under the fence: a takeover's claim is untouched.
            FailureRecord::Policy if e.kind == ErrorKind::LeaseLost => Some(false),
            FailureRecord::Policy => held.cache_failures,
            FailureRecord::Release => Some(false),
            FailureRecord::Abandon => return Recorded::Abandoned,
        },
        _ => held.cache_failures,
    };
    let (mut response, succeeded) = result.response();
    let mut unstorable = None;
    let mut backoff = Duration::from_millis(20);
    loop {
        if lease.state() == LeaseState::Lost {
            return Recorded::LeaseLost;
        }
        let completed = held
            .store
            .complete(
                &held.scope,
                &held.key,
                held.claim.fence,
                response.as_ref(),
                succeeded,
                cache_failures,
            )
            .await;
        match completed {
            Ok(_) => {
                return match unstorable {
                    Some(e) => Recorded::Unstorable(e),
                    None => Recorded::Yes,
                }
            }
            Err(e) if e.kind == ErrorKind::LeaseLost => return Recorded::LeaseLost,
            Err(e)
                if matches!(
                    e.kind,
                    ErrorKind::ResponseTooLarge | ErrorKind::InvalidArgument
                ) =>
            {
                if let Some(first) = unstorable {
                    // Not even the mark was taken (a server whose size limit is tiny): the
                    // claim is left to lapse, and a takeover finds it `recovered`.
                    tracing::error!(error = %e, "not even the mark of an unstorable result could be stored");
                    return Recorded::Unstorable(first);
                }
                // The effect happened; its result cannot be kept. A mark is kept instead, so
                // that a retry is told so rather than running the call again.
                tracing::warn!(error = %e, scope = %held.scope, "the result cannot be stored: a mark is recorded in its place");
                response = Some(Mark::Unrecorded(e.to_string()).to_response());
                unstorable = Some(e);
            }
            Err(e) => {
                if SystemTime::now() >= held.claim.expires_at {
                    return Recorded::Expired;
                }
                tracing::warn!(error = %e, "could not record the result: trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
