//! The numbers a claim is named by: fences from the fence sequence, and fresh upstream keys.

use pgrx::pg_sys;
use pgrx::IntoDatum;

/// The next fence from `idempotency.fence_seq`. The sequence never cycles, so a fence is
/// never handed out twice.
pub fn next_fence() -> i64 {
    let seq = crate::relations::oids().fence_seq;
    // SAFETY: nextval_oid takes exactly one argument, a regclass (an OID, which `seq` is), and
    // returns an int8, read here as i64; it uses neither flinfo nor a collation, which
    // direct_function_call leaves empty. We are inside a SQL function call, so in a
    // transaction, as nextval needs for its lock and WAL record; its errors (privileges, a
    // read-only transaction) come back through pgrx's guard as ordinary PostgreSQL errors.
    unsafe {
        pgrx::direct_function_call::<i64>(pg_sys::nextval_oid, &[seq.into_datum()])
            .unwrap_or_else(|| pgrx::error!("pg_idempotency: nextval returned NULL"))
    }
}

/// A fresh random (version 4) uuid: the call's upstream key.
pub fn new_upstream_key() -> pgrx::Uuid {
    let mut b = [0u8; 16];
    // SAFETY: pg_strong_random writes exactly `b.len()` bytes to the pointer, and `b` is a
    // local array of that length, borrowed mutably for the call.
    let filled = unsafe { pg_sys::pg_strong_random(b.as_mut_ptr().cast(), b.len()) };
    if !filled {
        pgrx::error!("pg_idempotency: could not generate random bytes");
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    pgrx::Uuid::from_bytes(b)
}
