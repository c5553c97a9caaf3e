//! What a call takes from the server: the wall clock, fences, fresh upstream keys, and a
//! durable commit.

use pgrx::pg_sys;
use pgrx::IntoDatum;

/// Microseconds since 2000-01-01, as PostgreSQL's `timestamptz` holds them.
pub type Micros = i64;

/// The wall clock at this moment (`clock_timestamp()`), not the transaction's start.
pub fn now() -> Micros {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// The next fence from `idempotency.fence_seq`. The sequence never cycles, so a fence is
/// never handed out twice.
pub fn next_fence() -> i64 {
    let seq = crate::relations::oids().fence_seq;
    unsafe {
        pgrx::direct_function_call::<i64>(pg_sys::nextval_oid, &[seq.into_datum()])
            .unwrap_or_else(|| pgrx::error!("pg_idempotency: nextval returned NULL"))
    }
}

/// A fresh random (version 4) uuid: the call's upstream key.
pub fn new_upstream_key() -> pgrx::Uuid {
    let mut b = [0u8; 16];
    if !unsafe { pg_sys::pg_strong_random(b.as_mut_ptr().cast(), b.len()) } {
        pgrx::error!("pg_idempotency: could not generate random bytes");
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    pgrx::Uuid::from_bytes(b)
}

/// The role that makes the call: outside our SECURITY DEFINER functions (SET ROLE counts).
pub fn caller() -> pg_sys::Oid {
    unsafe { pg_sys::GetOuterUserId() }
}

/// Makes this transaction's commit wait for its WAL flush, whatever the session set: a claim
/// or completion acknowledged and then lost in a crash would let a call run twice.
pub fn ensure_durable_commit() {
    unsafe {
        // `on` (remote flush) or `remote_apply` stand; `off`, `local` and `remote_write` are
        // raised: each acknowledges before a synchronous standby has the commit, and a
        // failover to it would lose the claim and hand its fence out again.
        if pg_sys::synchronous_commit
            < pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH as i32
        {
            pg_sys::set_config_option(
                c"synchronous_commit".as_ptr(),
                c"on".as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_LOCAL,
                true,
                0,
                false,
            );
        }
    }
}

/// Sleeps up to `micros`, waking for interrupts (a cancel ends the wait with an error).
pub fn nap(micros: i64) {
    let ms = (micros / 1000).clamp(1, 1000) as std::ffi::c_long;
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
}
