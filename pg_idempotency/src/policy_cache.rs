//! A scope's policy ([`ScopePolicy`]) and each backend's copy of the scopes' policies, so
//! that a call reads its policy from memory.
//!
//! `idem_set_policy` and `idem_drop_policy` send a relcache invalidation for the policies
//! table when they commit; every backend drops its copy when it processes it (at its next
//! transaction start at the latest), so a changed policy applies to every call that starts
//! after the change committed. The copy is also dropped when the table itself changes (a
//! drop and re-creation of the extension gives it a new OID).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::pg_sys;

use crate::{fetch, relations};

/// Per-scope defaults set with `idem_set_policy`: each field applies where a call gives none.
#[derive(Debug, Clone, Default)]
pub struct ScopePolicy {
    pub ttl: Option<i64>,
    pub lease: Option<i64>,
    pub on_cache_hit: Option<String>,
    pub cache_failures: Option<bool>,
    pub on_mismatch: Option<String>,
    /// How long past its ttl a record whose outcome is unknown is kept (0.8.0).
    pub unresolved_ttl: Option<i64>,
}

/// Enough for every scope of a real deployment; past it the copy starts over.
const MAX_SCOPES: usize = 4096;

thread_local! {
    static ENTRIES: RefCell<HashMap<String, ScopePolicy>> = RefCell::new(HashMap::new());
    static SEEN_EPOCH: Cell<u64> = const { Cell::new(u64::MAX) };
}

/// The policy of `scope` (all fields None when it has none).
pub fn of(scope: &str) -> ScopePolicy {
    let oids = relations::oids();
    if SEEN_EPOCH.get() != relations::policy_epoch() {
        ENTRIES.with(|e| e.borrow_mut().clear());
        SEEN_EPOCH.set(relations::policy_epoch());
    }
    if let Some(p) = ENTRIES.with(|e| e.borrow().get(scope).cloned()) {
        return p;
    }
    let before = relations::policy_epoch();
    let policy = read(oids, scope);
    // An invalidation that arrived while reading may be newer than what was read.
    if relations::policy_epoch() == before {
        ENTRIES.with(|e| {
            let mut e = e.borrow_mut();
            if e.len() >= MAX_SCOPES {
                e.clear();
            }
            e.insert(scope.to_owned(), policy.clone());
        });
    }
    policy
}

fn read(oids: relations::Oids, scope: &str) -> ScopePolicy {
    static COLUMNS: [&str; 6] = [
        "ttl",
        "lease",
        "on_cache_hit",
        "cache_failures",
        "on_mismatch",
        "unresolved_ttl",
    ];
    // A schema before 0.8.0 has no unresolved_ttl: a 'static prefix, as fetch wants.
    let unresolved = oids.schema >= relations::SchemaVersion::V0_8;
    let columns: &'static [&'static str] = if unresolved { &COLUMNS } else { &COLUMNS[..5] };
    fetch::by_key(
        oids.policies,
        oids.policies_pkey,
        &[fetch::Key::Text(scope)],
        columns,
        |row| ScopePolicy {
            ttl: row.interval_micros(0),
            lease: row.interval_micros(1),
            on_cache_hit: row.text(2),
            cache_failures: row.int(3).map(|b| b != 0),
            on_mismatch: row.text(4),
            unresolved_ttl: if unresolved {
                row.interval_micros(5)
            } else {
                None
            },
        },
    )
    .unwrap_or_default()
}

/// Tells every backend (this one included) to drop its copy once this transaction commits.
pub fn invalidate() {
    // SAFETY: called from idem_set_policy and idem_drop_policy, inside their transaction (the
    // invalidation is queued until it commits); the OID is the policies table's, which
    // relations::oids() has just checked exists.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relations::oids().policies) };
}
