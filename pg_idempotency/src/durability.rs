//! A durable commit for the transactions that claim or settle a record, whatever the session
//! set.

use pgrx::pg_sys;

/// Makes this transaction's commit wait for its WAL flush, whatever the session set: a claim
/// or completion acknowledged and then lost in a crash would let a call run twice.
pub fn ensure_durable_commit() {
    // SAFETY: synchronous_commit is the GUC's variable in this backend's own memory, read by
    // the process that owns it. set_config_option copies the two 'static C strings; with
    // GUC_ACTION_LOCAL inside the caller's transaction (every SQL function call is in one)
    // the change is undone when that transaction ends, as SET LOCAL is. elevel 0 makes a
    // refusal an ordinary ERROR, which pgrx's guard turns into a Rust panic.
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
