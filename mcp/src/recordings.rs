//! Calls already answered whose results are still being recorded.
//!
//! The first caller of a call gets the upstream server's answer as soon as the server gives
//! it; the completion that records it commits meanwhile (a duplicate arriving in between
//! waits for it, as for any running call). Those completions are counted here so that the
//! proxy, on its way out (stdin closed, SIGTERM, Ctrl-C), waits for them before it exits:
//! an agent host that closes a stdio proxy right after its last answer leaves no call
//! recorded as still running.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct Recordings(Arc<Inner>);

#[derive(Default)]
struct Inner {
    pending: AtomicUsize,
    settled: Notify,
}

impl Recordings {
    /// Runs `recording` in the background, counted until it ends.
    pub fn spawn(&self, recording: impl Future<Output = ()> + Send + 'static) {
        self.0.pending.fetch_add(1, Ordering::SeqCst);
        let counted = Counted(self.0.clone());
        tokio::spawn(async move {
            recording.await;
            drop(counted);
        });
    }

    /// Recordings not ended yet.
    pub fn pending(&self) -> usize {
        self.0.pending.load(Ordering::SeqCst)
    }

    /// Waits until no recording is pending, or `grace` has passed. Answers how many were
    /// left unfinished.
    pub async fn drain(&self, grace: Duration) -> usize {
        let drained = async {
            loop {
                // Registered before the count is read, so that no ending is missed.
                let settled = self.0.settled.notified();
                if self.pending() == 0 {
                    return;
                }
                settled.await;
            }
        };
        let _ = tokio::time::timeout(grace, drained).await;
        self.pending()
    }
}

/// Ends a recording's count when its task ends, normally or by a panic.
struct Counted(Arc<Inner>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::SeqCst);
        self.0.settled.notify_waiters();
    }
}
