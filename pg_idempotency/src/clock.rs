//! Time as a call sees it: the wall clock, and naps that a cancel can end.

use pgrx::pg_sys;

/// Microseconds since 2000-01-01, as PostgreSQL's `timestamptz` holds them.
pub type Micros = i64;

/// The wall clock at this moment (`clock_timestamp()`), not the transaction's start.
pub fn now() -> Micros {
    // SAFETY: GetCurrentTimestamp only reads the system clock (gettimeofday); it needs no
    // transaction, touches no shared state and cannot raise an error.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Sleeps up to `micros`, waking for interrupts (a cancel ends the wait with an error).
pub fn nap(micros: i64) {
    let ms = (micros / 1000).clamp(1, 1000) as std::ffi::c_long;
    // SAFETY: MyLatch is this backend's own latch, set up by InitProcess before any SQL
    // function can run, and only this process resets it. WL_EXIT_ON_PM_DEATH is among the
    // events, as WaitLatch requires of a backend that may outlive the postmaster. The latch
    // is reset before the interrupt check below, the order latch.h prescribes so that a
    // cancel arriving in between is not lost.
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
