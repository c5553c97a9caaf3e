//! Reads by primary key straight from the key index and the heap, without the executor.
//!
//! Every call starts by reading one record, and a replay does nothing else; through SPI that
//! read costs a whole statement (executor start, expression setup, plan locks) on top of
//! the caller's own statement. Here it costs an index probe. The visibility rules are the
//! ones a statement would have: a fresh snapshot after `CommandCounterIncrement` (as SPI
//! takes for each statement of a volatile function), the index's own collation, and the
//! same table access method code, so predicate locks under SERIALIZABLE are taken as usual.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;

use pgrx::{pg_sys, IntoDatum};

/// `columns` must be a static list (its address names it in a per-backend cache).
///
/// The values of `columns` (by name) of the row of `table` whose key index `index` holds
/// `keys`, copied into the current memory context (varlena values detoasted); None when
/// no row is visible.
pub fn by_key(
    table: pg_sys::Oid,
    index: pg_sys::Oid,
    keys: &[&str],
    columns: &'static [&'static str],
) -> Option<Vec<Option<pg_sys::Datum>>> {
    unsafe {
        // Earlier commands of this transaction (the caller's own writes) are visible, as
        // they would be to the next statement.
        pg_sys::CommandCounterIncrement();
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot());
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let rel = pg_sys::table_open(table, lock);
        let idx = pg_sys::index_open(index, lock);

        let mut scankeys: Vec<pg_sys::ScanKeyData> = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            let mut sk = pg_sys::ScanKeyData::default();
            pg_sys::ScanKeyInit(
                &mut sk,
                (i + 1) as pg_sys::AttrNumber,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::RegProcedure::from(pg_sys::F_TEXTEQ),
                key.into_datum().unwrap_or(pg_sys::Datum::from(0usize)),
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

        let found = pg_sys::index_getnext_slot(
            scan,
            pg_sys::ScanDirection::ForwardScanDirection,
            slot,
        );
        let values = found.then(|| {
            pg_sys::slot_getallattrs(slot);
            let desc = (*rel).rd_att;
            positions(table, desc, columns)
                .into_iter()
                .map(|n| {
                    if *(*slot).tts_isnull.add(n) {
                        return None;
                    }
                    Some(copy(*(*slot).tts_values.add(n), attribute(desc, n as i32)))
                })
                .collect()
        });

        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::index_endscan(scan);
        pg_sys::index_close(idx, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        pg_sys::UnregisterSnapshot(snapshot);
        values
    }
}

thread_local! {
    /// Where each asked-for column sits in a table's rows, by table and column list.
    static POSITIONS: RefCell<HashMap<(pg_sys::Oid, usize), Vec<usize>>> = RefCell::new(HashMap::new());
}

/// The attribute index of each of `columns` in `table` (whose descriptor is `desc`),
/// worked out once per backend, table and column list (a new table has a new OID).
unsafe fn positions(table: pg_sys::Oid, desc: pg_sys::TupleDesc, columns: &[&str]) -> Vec<usize> {
    let id = (table, columns.as_ptr() as usize);
    if let Some(p) = POSITIONS.with(|p| p.borrow().get(&id).cloned()) {
        return p;
    }
    let natts = unsafe { (*desc).natts };
    let found: Vec<usize> = columns
        .iter()
        .map(|name| {
            (0..natts)
                .map(|i| unsafe { attribute(desc, i) })
                .position(|a| {
                    !a.attisdropped
                        && unsafe { CStr::from_ptr(a.attname.data.as_ptr()) }.to_bytes()
                            == name.as_bytes()
                })
                .unwrap_or_else(|| pgrx::error!("pg_idempotency: column {name} is missing"))
        })
        .collect();
    POSITIONS.with(|p| p.borrow_mut().insert(id, found.clone()));
    found
}

/// A copy of a value that lives in a shared buffer, made while the snapshot still holds it.
unsafe fn copy(value: pg_sys::Datum, attr: &pg_sys::FormData_pg_attribute) -> pg_sys::Datum {
    unsafe {
        if attr.attbyval {
            value
        } else if attr.attlen == -1 {
            pg_sys::Datum::from(pg_sys::pg_detoast_datum_copy(value.cast_mut_ptr()))
        } else {
            let len = attr.attlen as usize;
            let to = pg_sys::palloc(len);
            std::ptr::copy_nonoverlapping(value.cast_mut_ptr::<u8>(), to.cast::<u8>(), len);
            pg_sys::Datum::from(to)
        }
    }
}

#[cfg(feature = "pg18")]
unsafe fn attribute<'a>(desc: pg_sys::TupleDesc, i: i32) -> &'a pg_sys::FormData_pg_attribute {
    unsafe { &*pg_sys::TupleDescAttr(desc, i) }
}

#[cfg(not(feature = "pg18"))]
unsafe fn attribute<'a>(desc: pg_sys::TupleDesc, i: i32) -> &'a pg_sys::FormData_pg_attribute {
    unsafe { &(*desc).attrs.as_slice((*desc).natts as usize)[i as usize] }
}
