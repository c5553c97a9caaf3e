//! The gate in front of a waiting `begin`: how many duplicates wait for a running call's
//! result at once, per principal (`[limits] max_waiting_per_principal`) and in all (the
//! pool less `[limits] reserved_connections`).
//!
//! A duplicate waits inside `idem_begin(..., wait)`, on a connection of the pool, for as
//! long as `wait`; or, when the call's holder is alive in this proxy, joins that holder and
//! waits for it in memory (the client's `admit_joined_wait`): both kinds of wait pass this
//! gate, and count against the same caps. Without a bound, the duplicates of one principal
//! hold every connection, and every other principal's calls queue behind them. A `begin` the gate does not admit
//! is asked with no wait: it is answered at once, as a duplicate without `wait` is (the
//! result if the call has one, else `in_progress` with `retryAfterMs`), and a call that
//! is not a duplicate claims as usual. So reaching the cap is not an error: a retry after
//! `retryAfterMs` gets the result.
//!
//! The principal reaches the store through a task-local value that the dispatch of a
//! `tools/call` sets (`as_principal`): the dispatcher asks `begin` from within that
//! dispatch's own task.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, SemaphorePermit};

/// Which cap a waiting `begin` reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capped {
    PerPrincipal,
    AllPrincipals,
}

impl Capped {
    /// The setting that caps it, as docs/mcp.md names it.
    pub fn setting(self) -> &'static str {
        match self {
            Capped::PerPrincipal => "limits.max_waiting_per_principal",
            Capped::AllPrincipals => "limits.reserved_connections",
        }
    }
}

/// The dispatch of one call: whose it is, and whether the gate cut its wait.
#[derive(Clone)]
struct Dispatch {
    principal: Arc<str>,
    capped: Arc<Mutex<Option<Capped>>>,
}

tokio::task_local! {
    static DISPATCH: Dispatch;
}

/// Runs `work` (a dispatch) as `principal`'s; answers what it answered and whether a wait
/// of it was cut short by a cap.
pub async fn as_principal<F: Future>(principal: &str, work: F) -> (F::Output, Option<Capped>) {
    let dispatch = Dispatch {
        principal: Arc::from(principal),
        capped: Arc::default(),
    };
    let capped = dispatch.capped.clone();
    let out = DISPATCH.scope(dispatch, work).await;
    let capped = *capped.lock().unwrap_or_else(|p| p.into_inner());
    (out, capped)
}

/// The `in_progress` answer's detail: how long the request waited, or why it did not.
pub fn in_progress_detail(capped: Option<Capped>, wait: Duration) -> String {
    match capped {
        None => format!(
            "It was still running when this request stopped waiting for it: after {wait:?}, or at once if the attempt's holder has stopped renewing its lease (retryAfterMs is then when that lease lapses and a retry takes the call over)."
        ),
        Some(c) => format!(
            "It was running, and this request did not wait for it: as many duplicates as {} allows were waiting already.",
            c.setting()
        ),
    }
}

pub struct Gate {
    per_principal: usize,
    all: Semaphore,
    waiting: Mutex<HashMap<Arc<str>, usize>>,
}

/// A waiting `begin` let through; dropped when it has its answer.
pub struct Admitted<'a> {
    gate: &'a Gate,
    principal: Arc<str>,
    _all: SemaphorePermit<'a>,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut waiting = self.gate.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = waiting.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                // No entry stays for a principal with no one waiting: the map is as large
                // as the crowd at its largest, not as every principal ever seen.
                waiting.remove(&self.principal);
            }
        }
        log_waiting(&waiting, "a waiting duplicate has its answer");
    }
}

impl Gate {
    /// `per_principal` waiting `begin`s of each principal, `all` of every principal.
    pub fn new(per_principal: usize, all: usize) -> Gate {
        Gate {
            per_principal,
            all: Semaphore::new(all),
            waiting: Mutex::default(),
        }
    }

    /// Lets a waiting `begin` of the current dispatch's principal through, or says which
    /// cap it reached (and tells the dispatch, for its answer). Never waits itself.
    pub fn admit(&self) -> Result<Admitted<'_>, Capped> {
        let dispatch = DISPATCH.try_with(Dispatch::clone).ok();
        let principal = dispatch
            .as_ref()
            .map_or_else(|| Arc::from(""), |d| d.principal.clone());
        let admitted = self.try_admit(principal);
        if let (Err(c), Some(d)) = (&admitted, &dispatch) {
            *d.capped.lock().unwrap_or_else(|p| p.into_inner()) = Some(*c);
        }
        admitted
    }

    fn try_admit(&self, principal: Arc<str>) -> Result<Admitted<'_>, Capped> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let n = waiting.get(&principal).copied().unwrap_or(0);
        if n >= self.per_principal {
            return Err(Capped::PerPrincipal);
        }
        let all = self.all.try_acquire().map_err(|_| Capped::AllPrincipals)?;
        waiting.insert(principal.clone(), n + 1);
        log_waiting(&waiting, "a duplicate waits");
        Ok(Admitted {
            gate: self,
            principal,
            _all: all,
        })
    }
}

/// How many duplicates the gate has let wait, in all, as it changes (at debug level, under
/// the gate's lock so that the lines come in the order of the changes): an operator's view
/// of the crowd, and what the proxy's tests order themselves by.
fn log_waiting(waiting: &HashMap<Arc<str>, usize>, what: &str) {
    let total: usize = waiting.values().sum();
    tracing::debug!(waiting = total, "{what}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn caps_per_principal_and_in_all() {
        let gate = Gate::new(2, 3);
        let ((a1, a2, a3), capped) =
            as_principal("a", async { (gate.admit(), gate.admit(), gate.admit()) }).await;
        assert!(a1.is_ok() && a2.is_ok());
        assert_eq!(a3.err(), Some(Capped::PerPrincipal));
        assert_eq!(capped, Some(Capped::PerPrincipal));
        let ((b1, b2), _) = as_principal("b", async { (gate.admit(), gate.admit()) }).await;
        assert!(b1.is_ok());
        assert_eq!(b2.err(), Some(Capped::AllPrincipals));
        // Each answer frees its place.
        drop((a1, a2, b1));
        assert!(gate.waiting.lock().unwrap().is_empty());
        let (again, capped) = as_principal("b", async { gate.admit().is_ok() }).await;
        assert!(again);
        assert_eq!(capped, None);
    }
}
