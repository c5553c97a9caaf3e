//! The holders alive in this process, by the record they hold: (the store's identity, scope,
//! key). A call of a key whose holder still lives in this process joins that holder (waits
//! for its recording, or is answered with its result) instead of asking the store, which,
//! once the holder's lease lapsed in an outage, would hand the call over and run the tool
//! a second time beside the holder that has the first run's result.
//!
//! One registry for the whole process, so that every dispatcher and every handle of one
//! store share it. Which handles are "one store" is [`identity_of`]'s rule.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::ran::Ran;
use crate::store::IdempotencyStore;

/// Where a live holder is.
#[derive(Debug, Clone)]
pub(crate) enum Stage {
    /// Its tool runs.
    Running,
    /// Its tool returned this; the holder is recording it.
    Ran(Ran),
    /// Recorded, or given up on: the store answers the next call.
    Settled,
}

/// What a joining call finds: the holder's stage, and its lease's length (how long the
/// holder's own dispatch waits for its recording).
#[derive(Clone)]
pub(crate) struct Joined {
    pub(crate) stage: watch::Receiver<Stage>,
    pub(crate) lease: Duration,
}

type Name = (String, String, String);

fn registry() -> &'static Mutex<HashMap<Name, Joined>> {
    static LIVE: OnceLock<Mutex<HashMap<Name, Joined>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// Which records a store's handle reaches, as this process can tell: the store's own
/// [`IdempotencyStore::identity`] (every handle over one pool or one server and prefix
/// shares it), else this handle itself (the `Arc`'s address: dispatchers given clones of
/// one `Arc` share it; a live holder keeps its store's `Arc`, so the address is not reused
/// while an entry names it).
pub(crate) fn identity_of(store: &Arc<dyn IdempotencyStore>) -> String {
    store
        .identity()
        .unwrap_or_else(|| format!("handle {:p}", Arc::as_ptr(store) as *const ()))
}

/// A holder's entry; dropping it (the holder ended, or was stopped) removes the entry.
pub(crate) struct Registration {
    name: Name,
    stage: watch::Sender<Stage>,
}

impl Registration {
    pub(crate) fn ran(&self, ran: &Ran) {
        self.stage.send_replace(Stage::Ran(ran.clone()));
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.stage.send_replace(Stage::Settled);
        let mut live = registry().lock().unwrap_or_else(|p| p.into_inner());
        // Only this holder's entry: a later holder of the same record may have replaced it.
        if live
            .get(&self.name)
            .is_some_and(|j| j.stage.same_channel(&self.stage.subscribe()))
        {
            live.remove(&self.name);
        }
    }
}

/// Enters a holder of (identity, scope, key) whose lease lasts `lease`.
pub(crate) fn register(identity: String, scope: &str, key: &str, lease: Duration) -> Registration {
    let (tx, rx) = watch::channel(Stage::Running);
    let name = (identity, scope.to_string(), key.to_string());
    let mut live = registry().lock().unwrap_or_else(|p| p.into_inner());
    live.insert(name.clone(), Joined { stage: rx, lease });
    Registration { name, stage: tx }
}

/// The live holder of (identity, scope, key) in this process, if any.
pub(crate) fn find(identity: &str, scope: &str, key: &str) -> Option<Joined> {
    let live = registry().lock().unwrap_or_else(|p| p.into_inner());
    let name = (identity.to_string(), scope.to_string(), key.to_string());
    live.get(&name)
        .filter(|j| !matches!(*j.stage.borrow(), Stage::Settled))
        .cloned()
}
