//! Reads by primary key straight from the key index and the heap, without the executor.
//!
//! Every call starts by reading one record, and a replay does nothing else; through SPI that
//! read costs a whole statement (executor start, expression setup, plan locks) on top of
//! the caller's own statement. Here it costs an index probe. The visibility rules are the
//! ones a statement would have: a fresh snapshot after `CommandCounterIncrement` (as SPI
//! takes for each statement of a volatile function), the index's own collation, and the
//! same table access method code, so predicate locks under SERIALIZABLE are taken as usual.
//!
//! Values are read in place, while the tuple's buffer is pinned, into Rust values; only a
//! jsonb that must outlive the read is copied. Each call into PostgreSQL costs a guard
//! (pgrx's setjmp), so the read makes as few as it can.

use std::cell::RefCell;
use std::ffi::CStr;
use std::rc::Rc;

use pgrx::pg_sys;
use pgrx::varlena;

/// Where one asked-for column sits in the table's rows, and how it is stored.
#[derive(Clone, Copy)]
struct Place {
    index: usize,
    attlen: i16,
    byval: bool,
}

/// The row found, readable while its buffer is pinned (inside [`by_key`]'s callback).
pub struct Row<'a> {
    slot: *mut pg_sys::TupleTableSlot,
    places: &'a [Place],
}

impl Row<'_> {
    fn datum(&self, column: usize) -> Option<pg_sys::Datum> {
        let n = self.places[column].index;
        // SAFETY: a Row exists only inside by_key's callback, while its slot is valid and
        // deformed by slot_getallattrs; `n` is an attribute number below the descriptor's
        // natts (places found it there), and the slot's arrays have natts entries.
        unsafe {
            if *(*self.slot).tts_isnull.add(n) {
                None
            } else {
                Some(*(*self.slot).tts_values.add(n))
            }
        }
    }

    /// The bytes of a varlena column (detoasted only if compressed or stored out of line).
    fn with_bytes<T>(&self, column: usize, f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        let d = self.datum(column)?;
        // SAFETY: the callers ask this of text and bytea columns only, so `d` points to a
        // varlena, in the pinned buffer or in the slot. A compressed or external value is
        // detoasted into a palloc'd copy in the current memory context (we are in a
        // transaction with an active snapshot, as fetching toast requires); the slice does
        // not escape `f`.
        unsafe {
            let mut ptr = d.cast_mut_ptr::<pg_sys::varlena>();
            if varlena::varatt_is_1b_e(ptr) || varlena::varatt_is_4b_c(ptr) {
                ptr = pg_sys::pg_detoast_datum_packed(ptr);
            }
            Some(f(varlena::varlena_to_byte_slice(ptr)))
        }
    }

    /// A text column as a `&str` for `f` (None when NULL; `f` gets "" when not UTF-8).
    pub fn with_str<T>(&self, column: usize, f: impl FnOnce(&str) -> T) -> Option<T> {
        self.with_bytes(column, |b| f(std::str::from_utf8(b).unwrap_or("")))
    }

    pub fn text(&self, column: usize) -> Option<String> {
        self.with_bytes(column, |b| String::from_utf8_lossy(b).into_owned())
    }

    pub fn bytes(&self, column: usize) -> Option<Vec<u8>> {
        self.with_bytes(column, <[u8]>::to_vec)
    }

    /// int8, int4, bool, oid, timestamptz: passed by value.
    pub fn int(&self, column: usize) -> Option<i64> {
        debug_assert!(self.places[column].byval);
        self.datum(column).map(|d| d.value() as i64)
    }

    pub fn uuid(&self, column: usize) -> Option<pgrx::Uuid> {
        let d = self.datum(column)?;
        let mut b = [0u8; 16];
        // SAFETY: asked of uuid columns only: a fixed-length 16-byte value passed by
        // reference, pointing into the pinned buffer or the slot.
        unsafe { std::ptr::copy_nonoverlapping(d.cast_mut_ptr::<u8>(), b.as_mut_ptr(), 16) };
        Some(pgrx::Uuid::from_bytes(b))
    }

    /// An interval, normalised to microseconds (None when NULL or infinite).
    pub fn interval_micros(&self, column: usize) -> Option<i64> {
        let d = self.datum(column)?;
        // SAFETY: asked of interval columns only: a 16-byte value passed by reference whose
        // typalign ('d') is the alignment the tuple's layout gives it, as the struct needs.
        let iv = unsafe { *d.cast_mut_ptr::<pg_sys::Interval>() };
        crate::args::raw_interval_micros(iv.month, iv.day, iv.time).map(|us| us as i64)
    }

    /// Where this row version lives.
    pub fn tid(&self) -> pg_sys::ItemPointerData {
        // SAFETY: the slot is valid while the Row exists (see `datum`); index_getnext_slot set
        // its tid to the row version found.
        unsafe { (*self.slot).tts_tid }
    }

    /// A copy in the current memory context, for a value handed back to PostgreSQL.
    pub fn copied(&self, column: usize) -> Option<pg_sys::Datum> {
        let d = self.datum(column)?;
        let place = self.places[column];
        // SAFETY: `place` is the column's own attlen and attbyval. A by-value datum is the
        // value; a varlena (attlen -1) is detoasted into a fresh palloc'd copy; a fixed-length
        // by-reference value has exactly attlen bytes, copied into as many palloc'd ones.
        // Both copies are in the current memory context, which outlives the buffer's pin.
        unsafe {
            Some(if place.byval {
                d
            } else if place.attlen == -1 {
                pg_sys::Datum::from(pg_sys::pg_detoast_datum_copy(d.cast_mut_ptr()))
            } else {
                let len = place.attlen as usize;
                let to = pg_sys::palloc(len);
                std::ptr::copy_nonoverlapping(d.cast_mut_ptr::<u8>(), to.cast::<u8>(), len);
                pg_sys::Datum::from(to)
            })
        }
    }
}

/// A text value as PostgreSQL lays it out (4-byte header), in Rust memory.
fn text_varlena(s: &str) -> Vec<u8> {
    let len = (s.len() + 4) as u32;
    let mut v = Vec::with_capacity(len as usize);
    // VARSIZE with a 4-byte header: the length shifted left by two (little-endian layout).
    v.extend_from_slice(&(len << 2).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
    v
}

/// One column of an index key: text (compared with the index's collation) or an OID-like
/// value (a role).
#[derive(Clone, Copy)]
pub enum Key<'a> {
    Text(&'a str),
    Oid(pg_sys::Oid),
}

/// Reads the row of `table` whose key index `index` holds `keys`, and hands `read` a view of
/// its `columns` (by name; a static list, whose address and length name it in a per-backend
/// cache).
/// None when no row is visible.
pub fn by_key<T>(
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    keys: &[Key<'_>],
    columns: &'static [&'static str],
    read: impl FnOnce(&Row<'_>) -> T,
) -> Option<T> {
    // The text values laid out as PostgreSQL reads them (empty for the other kinds); they
    // must outlive the scan.
    let texts: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| match k {
            Key::Text(t) => text_varlena(t),
            Key::Oid(_) => Vec::new(),
        })
        .collect();
    // SAFETY: every caller runs inside a SQL function call, so in a transaction. The snapshot
    // is registered (with the current resource owner) for the scan and unregistered after
    // it; table and index are opened with AccessShareLock and closed with NoLock, keeping
    // the lock to the transaction's end as the executor does. The text scan keys point into
    // `texts`, which lives past index_endscan; there are no more keys than the index's key
    // columns (records_pkey has 3, policies_pkey 1), so rd_indcollation has an entry for
    // each. The slot is dropped after `read` has returned, and `Row` cannot outlive `read`.
    // If an error is raised midway, the resource owner releases the snapshot, the relations
    // and the buffer pin at abort.
    unsafe {
        // Earlier commands of this transaction (the caller's own writes) are visible, as
        // they would be to the next statement.
        pg_sys::CommandCounterIncrement();
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(table, lock);
        let idx = pg_sys::index_open(index, lock);

        let mut scankeys: Vec<pg_sys::ScanKeyData> = Vec::with_capacity(keys.len());
        for (i, (key, text)) in keys.iter().zip(&texts).enumerate() {
            let mut sk = pg_sys::ScanKeyData::default();
            let (procedure, value) = match key {
                Key::Oid(oid) => (pg_sys::F_OIDEQ, pg_sys::Datum::from(*oid)),
                Key::Text(_) => (pg_sys::F_TEXTEQ, pg_sys::Datum::from(text.as_ptr())),
            };
            pg_sys::ScanKeyInit(
                &mut sk,
                (i + 1) as pg_sys::AttrNumber,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::RegProcedure::from(procedure),
                value,
            );
            // The index is ordered by its own collation: the search must use it.
            sk.sk_collation = *(*idx).rd_indcollation.add(i);
            scankeys.push(sk);
        }
        let nkeys = scankeys.len() as i32;
        #[cfg(feature = "pg18")]
        let scan = pg_sys::index_beginscan(rel, idx, snapshot, std::ptr::null_mut(), nkeys, 0);
        #[cfg(not(feature = "pg18"))]
        let scan = pg_sys::index_beginscan(rel, idx, snapshot, nkeys, 0);
        pg_sys::index_rescan(scan, scankeys.as_mut_ptr(), nkeys, std::ptr::null_mut(), 0);
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());

        let found =
            pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
        let result = found.then(|| {
            pg_sys::slot_getallattrs(slot);
            let places = places(table, (*rel).rd_att, columns);
            read(&Row {
                slot,
                places: &places,
            })
        });

        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::index_close(idx, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::UnregisterSnapshot(snapshot);
        result
    }
}

/// Which places: a table and a column list (a list and a prefix of it share an address: the
/// length tells them apart).
type PlacesId = (pg_sys::Oid, usize, usize);

thread_local! {
    /// Where each asked-for column sits, by table and column list. A handful of entries
    /// (two tables, a list each, a new OID after a re-creation), searched in order: every
    /// read looks here, and a shared slice costs it no copy.
    static PLACES: RefCell<Vec<(PlacesId, Rc<[Place]>)>> = const { RefCell::new(Vec::new()) };
}

/// The places of `columns` in `table` (whose descriptor is `desc`), worked out once per
/// backend, table and column list (a new table has a new OID).
///
/// # Safety
/// `desc` must be the descriptor of `table`, open (so valid) for the duration of the call.
unsafe fn places(table: pg_sys::Oid, desc: pg_sys::TupleDesc, columns: &[&str]) -> Rc<[Place]> {
    let id = (table, columns.as_ptr() as usize, columns.len());
    let known = PLACES.with(|p| {
        p.borrow()
            .iter()
            .find(|(k, _)| *k == id)
            .map(|(_, v)| Rc::clone(v))
    });
    if let Some(p) = known {
        return p;
    }
    // SAFETY: desc is the open table's descriptor (this function's contract).
    let natts = unsafe { (*desc).natts };
    let found: Vec<Place> = columns
        .iter()
        .map(|name| {
            (0..natts)
                .find_map(|i| {
                    // SAFETY: 0 <= i < natts of the valid descriptor `desc`.
                    let a = unsafe { attribute(desc, i) };
                    // SAFETY: attname is a NameData, always NUL-terminated within its
                    // NAMEDATALEN bytes, and borrowed from `a` for this comparison only.
                    let matches = !a.attisdropped
                        && unsafe { CStr::from_ptr(a.attname.data.as_ptr()) }.to_bytes()
                            == name.as_bytes();
                    matches.then_some(Place {
                        index: i as usize,
                        attlen: a.attlen,
                        byval: a.attbyval,
                    })
                })
                .unwrap_or_else(|| pgrx::error!("pg_idempotency: column {name} is missing"))
        })
        .collect();
    let found: Rc<[Place]> = found.into();
    PLACES.with(|p| {
        let mut p = p.borrow_mut();
        // Entries of dropped tables are never asked for again; a backend that outlives many
        // re-creations of the extension starts the list over rather than grow it.
        if p.len() >= 16 {
            p.clear();
        }
        p.push((id, Rc::clone(&found)));
    });
    found
}

/// Attribute `i` of `desc`.
///
/// # Safety
/// `desc` must be a valid descriptor, `0 <= i < natts`, and the reference must not be used
/// after the descriptor is released.
#[cfg(feature = "pg18")]
unsafe fn attribute<'a>(desc: pg_sys::TupleDesc, i: i32) -> &'a pg_sys::FormData_pg_attribute {
    // SAFETY: TupleDescAttr returns a pointer into `desc`'s attribute array for an `i` in
    // range (the contract), valid as long as `desc`.
    unsafe { &*pg_sys::TupleDescAttr(desc, i) }
}

/// Attribute `i` of `desc`.
///
/// # Safety
/// As for the PostgreSQL 18 version above.
#[cfg(not(feature = "pg18"))]
unsafe fn attribute<'a>(desc: pg_sys::TupleDesc, i: i32) -> &'a pg_sys::FormData_pg_attribute {
    // SAFETY: before 18 the attributes are an array of natts entries at the end of the
    // descriptor; the slice is bounds-checked, and `desc` is valid (the contract).
    unsafe { &(*desc).attrs.as_slice((*desc).natts as usize)[i as usize] }
}
