//! A claim's lease while its call runs: the heartbeat that extends it, and what the running
//! tool is told once it is lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::ErrorKind;
use crate::store::IdempotencyStore;

/// Where a running claim's lease stands, as its holder last learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseState {
    Held,
    /// The last heartbeat could not reach the store; the lease has not ended yet. Back to
    /// `Held` once one gets through.
    Failing,
    /// The heartbeat could not reach the store until the lease ended: another attempt may
    /// take the call over now. The fence still decides a completion.
    Unconfirmed,
    /// The store refused the fence: another attempt holds the call, or it was forgotten.
    Lost,
}

impl LeaseState {
    /// Whether the tool is told its lease is lost: the store refused the fence, or the
    /// lease ended without a heartbeat reaching the store.
    pub(crate) fn is_lost(self) -> bool {
        matches!(self, LeaseState::Unconfirmed | LeaseState::Lost)
    }
}

/// What a tool is told of its lease: a receiver of the heartbeat's findings, or nothing for
/// a call that holds no claim.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseWatch(Option<watch::Receiver<LeaseState>>);

impl LeaseWatch {
    pub(crate) fn new(rx: watch::Receiver<LeaseState>) -> LeaseWatch {
        LeaseWatch(Some(rx))
    }

    pub(crate) fn state(&self) -> LeaseState {
        self.0.as_ref().map_or(LeaseState::Held, |rx| *rx.borrow())
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.state().is_lost()
    }

    pub(crate) async fn lost(&self) {
        if let Some(rx) = &self.0 {
            let mut rx = rx.clone();
            if rx.wait_for(|s| s.is_lost()).await.is_ok() {
                return;
            }
        }
        // No claim, or the heartbeat ended with the lease held (the call was recorded).
        std::future::pending::<()>().await
    }
}

/// The heartbeat of one claim.
pub(crate) struct Keeper {
    pub(crate) store: Arc<dyn IdempotencyStore>,
    pub(crate) scope: String,
    pub(crate) key: String,
    pub(crate) fence: i64,
    /// What each extension asks for (None: the store's default, which is `length`).
    pub(crate) lease: Option<Duration>,
    /// How long a lease lasts, as the claim showed it.
    pub(crate) length: Duration,
    pub(crate) tx: watch::Sender<LeaseState>,
}

impl Keeper {
    /// Extends the lease every third of it, from `held_until` (the end of the claim's own
    /// lease, on this process's clock) until the store refuses the fence. A failed extension
    /// is tried again soon; once the lease has ended without one, the lease counts as lost
    /// (the tool is told), though the heartbeat keeps trying: if the store comes back before
    /// anyone took the call over, the fence still holds it.
    pub(crate) async fn run(self, mut held_until: Instant) {
        let period = (self.length / 3).max(Duration::from_millis(20));
        let again = (self.length / 10).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let mut next = held_until
            .checked_sub(self.length.saturating_sub(period))
            .unwrap_or_else(Instant::now);
        loop {
            tokio::time::sleep_until(next).await;
            let sent = Instant::now();
            let bound = held_until.saturating_duration_since(sent).max(period);
            let extended = tokio::time::timeout(
                bound,
                self.store
                    .extend(&self.scope, &self.key, self.fence, self.lease),
            )
            .await;
            match extended {
                Ok(Ok(_)) => {
                    held_until = sent + self.length;
                    next = sent + period;
                    if *self.tx.borrow() == LeaseState::Failing {
                        self.tx.send_replace(LeaseState::Held);
                    }
                }
                Ok(Err(e)) if e.kind == ErrorKind::LeaseLost => {
                    tracing::warn!(scope = %self.scope, fence = self.fence, "the lease was lost: another attempt holds the call, or it was forgotten");
                    self.tx.send_replace(LeaseState::Lost);
                    return;
                }
                failed => {
                    match failed {
                        Ok(Err(e)) => tracing::warn!(error = %e, "could not extend the lease"),
                        _ => tracing::warn!(
                            "could not extend the lease: the store did not answer in time"
                        ),
                    }
                    let state = *self.tx.borrow();
                    if Instant::now() >= held_until && !state.is_lost() {
                        tracing::warn!(scope = %self.scope, fence = self.fence, "the lease ended without a heartbeat reaching the store: counted as lost");
                        self.tx.send_replace(LeaseState::Unconfirmed);
                    } else if state == LeaseState::Held {
                        self.tx.send_replace(LeaseState::Failing);
                    }
                    next = Instant::now() + again;
                }
            }
        }
    }
}
