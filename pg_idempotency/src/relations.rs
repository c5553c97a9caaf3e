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
    /// The records' layout, as the catalogue shows it.
    pub schema: SchemaVersion,
}

/// The layouts of the records, one per release that changed them, oldest first (0.4.0 kept
/// 0.3.0's). Read from the catalogue, so a schema awaiting `ALTER EXTENSION pg_idempotency
/// UPDATE` is known for what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SchemaVersion {
    /// Records keyed by (scope, key): one key space shared by every role.
    V0_1,
    /// Keyed by (scope, key, owner): each role its own key space.
    V0_2,
    /// The records keep the claim's token and whether it was a takeover: a repeat of one
    /// attempt gets its claim back.
    V0_3,
    /// The records keep when their running attempt claimed, which `retry_after` counts
    /// from (before, the record's creation stands in).
    V0_5,
    /// The records keep until when one whose outcome is unknown (a claim, a mark) stays
    /// past its ttl: `unresolved_until`.
    V0_8,
    /// The records keep the length of the lease their holder last took, `lease_length`:
    /// whether the holder has stopped beating (pg_idempotency_protocol::estimate).
    V0_9,
}

impl SchemaVersion {
    /// The oldest layout this library serves: the current one and the two releases before
    /// it that changed the records (docs/installation.md, "Upgrading the extension"). An older
    /// schema is refused until its update runs, so the library carries no code for it.
    pub const OLDEST_SERVED: SchemaVersion = SchemaVersion::V0_5;

    /// The release that made this layout.
    pub fn release(self) -> &'static str {
        match self {
            SchemaVersion::V0_1 => "0.1.0",
            SchemaVersion::V0_2 => "0.2.0",
            SchemaVersion::V0_3 => "0.3.0",
            SchemaVersion::V0_5 => "0.5.0",
            SchemaVersion::V0_8 => "0.8.0",
            SchemaVersion::V0_9 => "0.9.0",
        }
    }

    /// Which layout the records have: the key index's width, then the columns each release
    /// added.
    fn of(records: pg_sys::Oid, records_pkey: pg_sys::Oid) -> SchemaVersion {
        if key_columns(records_pkey) < 3 {
            SchemaVersion::V0_1
        } else if !has_column(records, c"claim_token") {
            SchemaVersion::V0_2
        } else if !has_column(records, c"claimed_at") {
            SchemaVersion::V0_3
        } else if !has_column(records, c"unresolved_until") {
            SchemaVersion::V0_5
        } else if !has_column(records, c"lease_length") {
            SchemaVersion::V0_8
        } else {
            SchemaVersion::V0_9
        }
    }
}

/// Refuses every call on a schema older than the window: this library no longer knows its
/// records. The extension's update brings the schema into the window, records kept.
fn refuse(found: SchemaVersion, function: &'static str) -> ! {
    pgrx::pg_sys::panic::ErrorReport::new(
        pgrx::PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "pg_idempotency's schema in this database is {}, older than this library serves",
            found.release()
        ),
        function,
    )
    .set_detail(format!(
        "The installed library (pg_idempotency {}) serves the schemas of {} and later; this \
         database's extension was not updated when the library was. Its records are kept, \
         and served again after the update.",
        env!("CARGO_PKG_VERSION"),
        SchemaVersion::OLDEST_SERVED.release(),
    ))
    .set_hint(
        "Run ALTER EXTENSION pg_idempotency UPDATE in this database (as its owner or a superuser).",
    )
    .report(pgrx::PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
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

/// The storage objects' OIDs: an error when the extension's schema is incomplete, or older
/// than this library serves (see [`SchemaVersion::OLDEST_SERVED`]).
pub fn oids() -> Oids {
    served(oids_unchecked(), "pg_idempotency")
}

/// The storage objects' OIDs, whichever schema they belong to (an error when it is
/// incomplete).
fn oids_unchecked() -> Oids {
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
        schema: SchemaVersion::of(records, records_pkey),
    };
    OIDS.set(Some(o));
    // New objects: nothing remembered about the old ones applies.
    POLICY_EPOCH.set(POLICY_EPOCH.get().wrapping_add(1));
    o
}

/// `o`, when this library serves its schema; otherwise the call is refused, the error
/// located at `function`.
fn served(o: Oids, function: &'static str) -> Oids {
    if o.schema < SchemaVersion::OLDEST_SERVED {
        refuse(o.schema, function);
    }
    o
}

/// Refuses the call of SQL function `function` unless this library serves the database's
/// schema: the first thing every call does (`entry::call`).
pub fn check_served(function: &'static str) {
    served(oids_unchecked(), function);
}

/// Changes whenever what a backend remembers about the policies may be stale.
pub fn policy_epoch() -> u64 {
    POLICY_EPOCH.get()
}
