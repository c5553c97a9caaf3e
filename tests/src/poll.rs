//! Waiting for observable state instead of sleeping: a test that needs something to have
//! happened (a lease to lapse, a session to be seen waiting, the purge worker to act) polls
//! for it, with a bound, and says what it waited for when the bound runs out.
//!
//! The one set of polls for every crate's tests: blocking ones for the suite's synchronous
//! tests, async ones (tokio's timer) for the client's, the server's, the proxy's and the
//! fault trials'. The bound is generous on purpose: a loaded machine must not fail a test
//! whose state arrives late; only state that never arrives does.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a poll naps between looks: short next to the leases and ttls the suite uses.
const NAP: Duration = Duration::from_millis(10);

/// The bound of a poll that has no reason to pick its own: a minute.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Polls `check` until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(NAP);
    }
}

/// Polls `check` until it holds; panics naming `what` if it does not within `limit`.
pub fn wait_until(what: &str, limit: Duration, check: impl FnMut() -> bool) {
    assert!(
        eventually(limit, check),
        "waited {limit:?} for {what}, in vain"
    );
}

/// `eventually` for async tests, with an async check: it naps on tokio's timer.
pub async fn eventually_async<F: Future<Output = bool>>(
    limit: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let until = Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        tokio::time::sleep(NAP).await;
    }
}

/// `wait_until` for async tests, with an async check.
pub async fn until_async<F: Future<Output = bool>>(
    what: &str,
    limit: Duration,
    check: impl FnMut() -> F,
) {
    assert!(
        eventually_async(limit, check).await,
        "waited {limit:?} for {what}, in vain"
    );
}

/// `wait_until` for async tests whose check is a plain look (an atomic, a file): it naps
/// on tokio's timer, so the tasks it waits for go on.
pub async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    until_async(what, limit, || std::future::ready(check())).await
}

/// A bound for a poll whose loop does async work of its own between looks (a take-over
/// attempt, a lookup whose answer the loop keeps): the loop calls `tick` before it looks
/// again, and the test fails once the bound has passed.
pub struct Deadline {
    what: String,
    until: Instant,
}

impl Deadline {
    pub fn new(what: &str, limit: Duration) -> Deadline {
        Deadline {
            what: what.to_string(),
            until: Instant::now() + limit,
        }
    }

    /// Naps before the next look; fails the test once the bound has passed.
    pub async fn tick(&mut self) {
        self.tick_every(NAP).await
    }

    pub async fn tick_every(&mut self, pause: Duration) {
        assert!(
            Instant::now() < self.until,
            "never saw {} within the bound",
            self.what
        );
        tokio::time::sleep(pause).await;
    }
}
