//! Waiting for observable state instead of sleeping: a test that needs something to have
//! happened (a lease to lapse, a session to be seen waiting, the purge worker to act) polls
//! for it, with a bound, and says what it waited for when the bound runs out.

use std::time::{Duration, Instant};

/// How long a poll naps between looks: short next to the leases and ttls the suite uses.
const NAP: Duration = Duration::from_millis(10);

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
