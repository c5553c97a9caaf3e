//! Outcome counts per owner and scope, for `idem_metrics()`'s `*_total` columns.
//!
//! Each answer is counted in this backend's memory first, then written by a later call that
//! succeeds (the next one that writes a record anyway: a claim or a completion; or the first
//! one `pg_idempotency.count_flush_interval_ms` after the last write, so that a replay stays
//! a read), in its transaction, to this backend's own row of the scope in
//! `idempotency.counts` (the slot is the backend's number, which no other live backend has):
//! two callers of one scope never wait on each other's row, however long their
//! transactions. The counts are of answers given: a refusal raised (which rolls back its
//! transaction) stays in memory until the backend's next call writes it, and counts written
//! by a transaction or savepoint that rolls back come back into memory and are written
//! again. A backend that ends before its next call loses what it held (its refusals only).
//! No bound on the number of scopes: see docs/decisions.md, "Counts that never fold".

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::callbacks::{
    register_subxact_callback, register_xact_callback, PgSubXactCallbackEvent, PgXactCallbackEvent,
};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::OwnedPreparedStatement;
use pgrx::PgOid;

use crate::entry::{rows, Args, Column};
use crate::error::IdemResult;
use crate::gucs;

/// What one answer counts as; the order of the `counts` table's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Claimed = 0,
    Replay = 1,
    InProgress = 2,
    /// IK001 (a batch's item: `mismatch`).
    Mismatch = 3,
    /// IK002 (a batch's item: `refused`).
    Refused = 4,
    /// A completion with the client's `unrecorded` mark.
    Unrecorded = 5,
    /// A completion with the client's `outcome_unknown` mark.
    OutcomeUnknown = 6,
}

impl Counter {
    /// The counter of a mark, as the SQL's `_idem_mark` names it.
    pub fn of_mark(mark: &str) -> Option<Counter> {
        match mark {
            "unrecorded" => Some(Counter::Unrecorded),
            "outcome_unknown" => Some(Counter::OutcomeUnknown),
            _ => None,
        }
    }
}

const KINDS: usize = 7;
type Counts = [i64; KINDS];
type Pair = (u32, String);

thread_local! {
    /// Counted and not yet written.
    static PENDING: RefCell<HashMap<Pair, Counts>> = RefCell::new(HashMap::new());
    /// Written in the open transaction, with the subtransaction that wrote them: a rollback
    /// of it puts them back into PENDING.
    static WRITTEN: RefCell<Vec<(pg_sys::SubTransactionId, Pair, Counts)>> =
        const { RefCell::new(Vec::new()) };
    /// Whether the open transaction has our end-of-transaction callbacks.
    static HOOKED: Cell<bool> = const { Cell::new(false) };
    /// When this backend last wrote its counts.
    static LAST_FLUSH: Cell<Option<std::time::Instant>> = const { Cell::new(None) };
    /// The saved upsert (leaked: it lives as long as the backend).
    static UPSERT: Cell<Option<&'static OwnedPreparedStatement>> = const { Cell::new(None) };
}

/// FNV-1a of the owner and the scope, never 0 (the estimates' table keys on it).
pub fn hash(owner: u32, scope: &str) -> u64 {
    let h = owner
        .to_le_bytes()
        .into_iter()
        .chain(scope.bytes())
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
    h.max(1)
}

/// Counts one answer of `owner` for `scope` (written by the next [`flush`]).
pub fn count(owner: pg_sys::Oid, scope: &str, c: Counter) {
    if !gucs::count_outcomes() {
        return;
    }
    PENDING.with_borrow_mut(|p| {
        p.entry((u32::from(owner), scope.to_string()))
            .or_insert([0; KINDS])[c as usize] += 1
    });
}

/// The `counts` table, when the installed schema has it (0.8.0 on; a 0.7.0 catalogue not
/// yet updated counts nothing).
fn counts_table() -> bool {
    // SAFETY: syscache lookups by name, in a transaction (we are inside a SQL call).
    unsafe {
        let ns = pg_sys::get_namespace_oid(c"idempotency".as_ptr(), true);
        ns != pg_sys::InvalidOid
            && pg_sys::get_relname_relid(c"counts".as_ptr(), ns) != pg_sys::InvalidOid
    }
}

/// This backend's row of a scope: its number, unique among the live backends.
fn slot() -> i32 {
    // SAFETY: a plain variable of this process, set at backend start.
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    let n = unsafe { pg_sys::MyProcNumber };
    #[cfg(not(any(feature = "pg17", feature = "pg18")))]
    let n = unsafe { pg_sys::MyBackendId };
    n as i32
}

const UPSERT_SQL: &str = "\
    INSERT INTO idempotency.counts AS c (owner, scope, slot, claimed, replay, in_progress, \
        mismatch, refused, unrecorded, outcome_unknown) \
    SELECT o::pg_catalog.oid::pg_catalog.regrole, s, $3, n1, n2, n3, n4, n5, n6, n7 \
    FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($4), \
        pg_catalog.unnest($5), pg_catalog.unnest($6), pg_catalog.unnest($7), pg_catalog.unnest($8), \
        pg_catalog.unnest($9), pg_catalog.unnest($10)) AS u(o, s, n1, n2, n3, n4, n5, n6, n7) \
    ON CONFLICT (owner, scope, slot) DO UPDATE SET \
        claimed = c.claimed OPERATOR(pg_catalog.+) excluded.claimed, \
        replay = c.replay OPERATOR(pg_catalog.+) excluded.replay, \
        in_progress = c.in_progress OPERATOR(pg_catalog.+) excluded.in_progress, \
        mismatch = c.mismatch OPERATOR(pg_catalog.+) excluded.mismatch, \
        refused = c.refused OPERATOR(pg_catalog.+) excluded.refused, \
        unrecorded = c.unrecorded OPERATOR(pg_catalog.+) excluded.unrecorded, \
        outcome_unknown = c.outcome_unknown OPERATOR(pg_catalog.+) excluded.outcome_unknown";

fn upsert(client: &pgrx::spi::SpiClient<'_>) -> &'static OwnedPreparedStatement {
    if let Some(plan) = UPSERT.get() {
        return plan;
    }
    use pg_sys::{INT4OID, INT8ARRAYOID, TEXTARRAYOID};
    let types: Vec<PgOid> = [
        INT8ARRAYOID,
        TEXTARRAYOID,
        INT4OID,
        INT8ARRAYOID,
        INT8ARRAYOID,
        INT8ARRAYOID,
        INT8ARRAYOID,
        INT8ARRAYOID,
        INT8ARRAYOID,
        INT8ARRAYOID,
    ]
    .into_iter()
    .map(PgOid::from)
    .collect();
    let plan: &'static OwnedPreparedStatement = Box::leak(Box::new(
        client
            .prepare_mut(UPSERT_SQL, &types)
            .unwrap_or_else(|e| panic!("pg_idempotency: cannot prepare statement: {e}"))
            .keep(),
    ));
    UPSERT.set(Some(plan));
    plan
}

/// Writes what this backend has counted, in the open transaction, to its rows. Called at
/// the end of each call that succeeded; `wrote`: the call wrote a record (a claim, a
/// completion), so one more row written costs it little. A call that wrote nothing writes
/// the counts only once the flush interval has passed since the last write.
pub fn flush(wrote: bool) {
    if PENDING.with_borrow(HashMap::is_empty) {
        return;
    }
    let due = LAST_FLUSH
        .get()
        .is_none_or(|at| at.elapsed() >= gucs::count_flush_interval());
    if !wrote && !due {
        return;
    }
    LAST_FLUSH.set(Some(std::time::Instant::now()));
    let pending: Vec<(Pair, Counts)> = PENDING.with_borrow_mut(|p| p.drain().collect());
    if !counts_table() {
        return;
    }
    let owners: Vec<i64> = pending.iter().map(|((o, _), _)| *o as i64).collect();
    let scopes: Vec<String> = pending.iter().map(|((_, s), _)| s.clone()).collect();
    let column = |k: usize| -> Vec<i64> { pending.iter().map(|(_, n)| n[k]).collect() };
    let args: Vec<DatumWithOid<'_>> = vec![
        owners.into(),
        scopes.into(),
        slot().into(),
        column(0).into(),
        column(1).into(),
        column(2).into(),
        column(3).into(),
        column(4).into(),
        column(5).into(),
        column(6).into(),
    ];
    Spi::connect_mut(|client| {
        let plan = upsert(client);
        client
            .update(plan, None, &args)
            .unwrap_or_else(|e| panic!("pg_idempotency: statement failed: {e}"));
    });
    // SAFETY: we are in a transaction (inside a SQL call).
    let sub = unsafe { pg_sys::GetCurrentSubTransactionId() };
    WRITTEN.with_borrow_mut(|w| w.extend(pending.into_iter().map(|(p, n)| (sub, p, n))));
    hook();
}

/// Puts written counts back into PENDING.
fn unwrite(which: impl Fn(pg_sys::SubTransactionId) -> bool) {
    let back: Vec<(Pair, Counts)> = WRITTEN.with_borrow_mut(|w| {
        let (back, keep): (Vec<_>, Vec<_>) = w.drain(..).partition(|(s, _, _)| which(*s));
        *w = keep;
        back.into_iter().map(|(_, p, n)| (p, n)).collect()
    });
    PENDING.with_borrow_mut(|p| {
        for (pair, n) in back {
            let to = p.entry(pair).or_insert([0; KINDS]);
            for k in 0..KINDS {
                to[k] += n[k];
            }
        }
    });
}

/// Once per transaction that wrote counts: at its end, what it wrote is kept (commit) or
/// comes back into memory (abort); a savepoint rolled back gives back what it wrote, one
/// released hands it to its parent.
fn hook() {
    if HOOKED.replace(true) {
        return;
    }
    register_xact_callback(PgXactCallbackEvent::Commit, || {
        WRITTEN.with_borrow_mut(Vec::clear);
        HOOKED.set(false);
    });
    register_xact_callback(PgXactCallbackEvent::Abort, || {
        unwrite(|_| true);
        HOOKED.set(false);
    });
    register_subxact_callback(PgSubXactCallbackEvent::AbortSub, |sub, _parent| {
        unwrite(|s| s == sub);
    });
    register_subxact_callback(PgSubXactCallbackEvent::CommitSub, |sub, parent| {
        WRITTEN.with_borrow_mut(|w| {
            for (s, _, _) in w.iter_mut().filter(|(s, _, _)| *s == sub) {
                *s = parent;
            }
        })
    });
}

/// `idempotency._idem_counters()` (0.2.0 to 0.7.0): the shared-memory counters of those
/// releases, gone. No rows, for a 0.7.0 catalogue run by this library before its update.
pub fn idem_owner_counters(a: &Args) -> IdemResult<pg_sys::Datum> {
    let none: Vec<Vec<Column>> = Vec::new();
    Ok(rows(a, &none))
}

/// Whether this session counts outcomes (pg_idempotency.count_outcomes).
pub fn idem_counting(_a: &Args) -> IdemResult<pg_sys::Datum> {
    Ok(pg_sys::Datum::from(gucs::count_outcomes()))
}
