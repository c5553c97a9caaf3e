//! `idem_purge_expired`: reclaims the rows of expired records, in short batches.
//!
//! Expiry is decided at read time, so purging is only about space. Each batch is one
//! statement that walks the table in physical order from where the previous batch stopped
//! (a TID range scan: no index on `expires_at`, whose updates would make every completion a
//! non-HOT update), locks at most `batch_size` expired rows with SKIP LOCKED (a row that a
//! concurrent idem_begin is claiming again is left for the next run) and deletes them. A
//! live record is never deleted: the row is re-checked under its lock.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::{pg_sys, IntoDatum};

use crate::call_args::PurgeExpiredArgs;
use crate::clock::{self, Micros};
use crate::entry::Args;
use crate::error::{IdemError, IdemResult};
use crate::gucs;

const BATCH: &str = "WITH doomed AS ( \
        SELECT ctid FROM idempotency.records \
        WHERE ctid OPERATOR(pg_catalog.>) $1 AND expires_at OPERATOR(pg_catalog.<=) $2 \
        LIMIT $3 FOR UPDATE SKIP LOCKED) \
     DELETE FROM idempotency.records r USING doomed \
     WHERE r.ctid OPERATOR(pg_catalog.=) doomed.ctid AND r.expires_at OPERATOR(pg_catalog.<=) $2 \
     RETURNING r.ctid";

/// The same since 0.8.0: a record whose outcome is unknown stays until its unresolved bound.
const BATCH_UNRESOLVED: &str = "WITH doomed AS ( \
        SELECT ctid FROM idempotency.records \
        WHERE ctid OPERATOR(pg_catalog.>) $1 AND expires_at OPERATOR(pg_catalog.<=) $2 \
            AND COALESCE(unresolved_until OPERATOR(pg_catalog.<=) $2, true) \
        LIMIT $3 FOR UPDATE SKIP LOCKED) \
     DELETE FROM idempotency.records r USING doomed \
     WHERE r.ctid OPERATOR(pg_catalog.=) doomed.ctid AND r.expires_at OPERATOR(pg_catalog.<=) $2 \
         AND COALESCE(r.unresolved_until OPERATOR(pg_catalog.<=) $2, true) \
     RETURNING r.ctid";

/// Where a purge has got to in the table.
#[derive(Clone, Copy)]
pub struct Cursor {
    after: pg_sys::ItemPointerData,
}

impl Cursor {
    pub fn start() -> Self {
        Cursor {
            after: pg_sys::ItemPointerData::default(),
        }
    }
}

/// Deletes up to `batch_size` expired rows after `cursor`; returns how many, and where the
/// next batch starts (None once the end of the table was reached).
pub fn batch(
    client: &mut SpiClient<'_>,
    cursor: Cursor,
    now: Micros,
    batch_size: i64,
) -> (i64, Option<Cursor>) {
    let after = DatumWithOid::from(cursor.after);
    let args = [
        after,
        // SAFETY: a timestamptz is an int64 of microseconds passed by value, as `now`.
        unsafe { DatumWithOid::new(now, pg_sys::TIMESTAMPTZOID) },
        batch_size.into(),
    ];
    let statement = if crate::relations::oids().schema >= crate::relations::SchemaVersion::V0_8 {
        BATCH_UNRESOLVED
    } else {
        BATCH
    };
    let table = client
        .update(statement, None, &args)
        .unwrap_or_else(|e| panic!("pg_idempotency: purge batch failed: {e}"));
    let mut deleted = 0i64;
    let mut last = cursor.after;
    for row in table {
        deleted += 1;
        if let Ok(Some(tid)) = row.get::<pg_sys::ItemPointerData>(1) {
            if item_pointer_gt(&tid, &last) {
                last = tid;
            }
        }
    }
    let more = deleted >= batch_size;
    (deleted, more.then_some(Cursor { after: last }))
}

fn item_pointer_gt(a: &pg_sys::ItemPointerData, b: &pg_sys::ItemPointerData) -> bool {
    let key = |p: &pg_sys::ItemPointerData| {
        (
            ((p.ip_blkid.bi_hi as u32) << 16) | p.ip_blkid.bi_lo as u32,
            p.ip_posid,
        )
    };
    key(a) > key(b)
}

/// The batch size a call gives, else `pg_idempotency.purge_batch_size` (the worker's).
pub fn batch_size(value: Option<i32>) -> IdemResult<i64> {
    match value {
        Some(n) if n > 0 => Ok(n as i64),
        Some(n) => Err(IdemError::invalid(
            "batch_size must be positive",
            format!("batch_size is {n}."),
            "Pass a positive batch size, or NULL for pg_idempotency.purge_batch_size.",
        )),
        None => Ok(gucs::purge_batch_size()),
    }
}

/// `idem_purge_expired(batch_size)`: every expired row, batch after batch, in the caller's
/// transaction.
pub fn idem_purge_expired(a: &Args) -> IdemResult<pg_sys::Datum> {
    let size = batch_size(PurgeExpiredArgs::read(a).batch_size)?;
    let total = Spi::connect_mut(|client| {
        let now = clock::now();
        let mut cursor = Some(Cursor::start());
        let mut total = 0i64;
        while let Some(c) = cursor {
            let (n, next) = batch(client, c, now, size);
            total += n;
            cursor = next;
            pgrx::check_for_interrupts!();
        }
        total
    });
    Ok(total
        .into_datum()
        .unwrap_or_else(|| pg_sys::Datum::from(0usize)))
}
