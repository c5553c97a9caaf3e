//! The OIDs of the storage objects, looked up once per backend, and the invalidation that
//! forgets them (and the backend's copy of the policies) when any of them changes: a drop
//! and re-creation of the extension, a restore, an `idem_set_policy` elsewhere.

use std::cell::Cell;
use std::ffi::CStr;

use pgrx::pg_sys;

#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Oids {
    pub records: pg_sys::Oid,
    pub records_pkey: pg_sys::Oid,
    pub policies: pg_sys::Oid,
    pub policies_pkey: pg_sys::Oid,
    pub fence_seq: pg_sys::Oid,
    /// Citus is installed: the tables may be distributed, and only SQL reaches their rows.
    pub distributed: bool,
    /// The records are keyed by (scope, key, owner): each role its own key space (0.2.0).
    /// False while a 0.1.0 schema awaits `ALTER EXTENSION pg_idempotency UPDATE`: this
    /// library then serves it as 0.1.0 did, one key space shared by every role.
    pub owner_keyed: bool,
    /// The records keep the claim's token and whether it was a takeover (0.3.0): a repeat
    /// of one attempt gets its claim back. False for an older schema awaiting its update.
    pub claim_tokens: bool,
    /// The records keep when their running attempt claimed (0.5.0), which `retry_after`
    /// counts from. False for an older schema awaiting its update: its creation time
    /// stands in.
    pub claim_times: bool,
}

/// What the saved statements over the records must be made for: records keyed by owner
/// (0.2.0), records with claim tokens (0.3.0), records with claim times (0.5.0).
pub type Layout = (bool, bool, bool);

impl Oids {
    /// The layout of the records this schema has.
    pub fn layout(&self) -> Layout {
        (self.owner_keyed, self.claim_tokens, self.claim_times)
    }
}

thread_local! {
    static OIDS: Cell<Option<Oids>> = const { Cell::new(None) };
    /// Bumped whenever the policies table (or everything) is invalidated.
    static POLICY_EPOCH: Cell<u64> = const { Cell::new(0) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Runs while PostgreSQL processes invalidations: it must not error or allocate memory
/// that PostgreSQL tracks, so it only sets cells.
///
/// # Safety
/// Only for PostgreSQL's relcache invalidation, on this backend's thread (it is unsafe only
/// because the callback type is); `relid` is the relation invalidated, InvalidOid for all.
unsafe extern "C-unwind" fn invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let Some(o) = OIDS.get() else {
        return;
    };
    let ours = [
        o.records,
        o.records_pkey,
        o.policies,
        o.policies_pkey,
        o.fence_seq,
    ];
    if relid == pg_sys::InvalidOid || ours.contains(&relid) {
        OIDS.set(None);
        POLICY_EPOCH.set(POLICY_EPOCH.get().wrapping_add(1));
    }
}

fn relid(nsp: pg_sys::Oid, name: &CStr) -> pg_sys::Oid {
    // SAFETY: a NUL-terminated name and a namespace OID; a syscache lookup, valid because
    // we are inside a SQL function call, so in a transaction. A missing relation is
    // InvalidOid, not an error.
    let oid = unsafe { pg_sys::get_relname_relid(name.as_ptr(), nsp) };
    if oid == pg_sys::InvalidOid {
        pgrx::error!(
            "pg_idempotency: idempotency.{} is missing",
            name.to_string_lossy()
        );
    }
    oid
}

/// How many key columns an index has.
fn key_columns(index: pg_sys::Oid) -> i16 {
    // SAFETY: in a transaction (inside a SQL function call). index_open raises an error
    // unless `index` is an index, and the open relation's rd_index is valid until
    // index_close, which releases the lock it took.
    unsafe {
        let idx = pg_sys::index_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let n = (*(*idx).rd_index).indnkeyatts;
        pg_sys::index_close(idx, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        n
    }
}

/// Whether `table` has a column `name`.
fn has_column(table: pg_sys::Oid, name: &CStr) -> bool {
    // SAFETY: a NUL-terminated column name and a table OID; a syscache lookup in the
    // caller's transaction, InvalidAttrNumber when there is no such column.
    unsafe { pg_sys::get_attnum(table, name.as_ptr()) != pg_sys::InvalidAttrNumber as i16 }
}

/// The storage objects' OIDs (an error when the extension's schema is incomplete).
pub fn oids() -> Oids {
    if !REGISTERED.get() {
        // SAFETY: `invalidated` is a plain function, valid for the backend's life, and is
        // registered once per backend (PostgreSQL's table of callbacks is small and never
        // shrinks); its argument is unused.
        unsafe {
            pg_sys::CacheRegisterRelcacheCallback(Some(invalidated), pg_sys::Datum::from(0usize))
        };
        REGISTERED.set(true);
    }
    if let Some(o) = OIDS.get() {
        return o;
    }
    // SAFETY: a 'static NUL-terminated name; a syscache lookup in the caller's transaction,
    // which raises an error if the schema is missing.
    let nsp = unsafe { pg_sys::get_namespace_oid(c"idempotency".as_ptr(), false) };
    let records_pkey = relid(nsp, c"records_pkey");
    let records = relid(nsp, c"records");
    let o = Oids {
        records,
        records_pkey,
        policies: relid(nsp, c"policies"),
        policies_pkey: relid(nsp, c"policies_pkey"),
        fence_seq: relid(nsp, c"fence_seq"),
        // SAFETY: a 'static NUL-terminated name; a catalog lookup in the caller's
        // transaction, InvalidOid when Citus is not installed.
        distributed: unsafe { pg_sys::get_extension_oid(c"citus".as_ptr(), true) }
            != pg_sys::InvalidOid,
        owner_keyed: key_columns(records_pkey) == 3,
        claim_tokens: has_column(records, c"claim_token"),
        claim_times: has_column(records, c"claimed_at"),
    };
    OIDS.set(Some(o));
    // New objects: nothing remembered about the old ones applies.
    POLICY_EPOCH.set(POLICY_EPOCH.get().wrapping_add(1));
    o
}

/// Changes whenever what a backend remembers about the policies may be stale.
pub fn policy_epoch() -> u64 {
    POLICY_EPOCH.get()
}
