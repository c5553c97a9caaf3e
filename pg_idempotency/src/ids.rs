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
    random_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    pgrx::Uuid::from_bytes(b)
}

/// Fills `b` from the kernel's CSPRNG with one getrandom(2) call. A PostgreSQL built without
/// OpenSSL (as the PostgreSQL 18 the benchmarks run on is) makes `pg_strong_random` open,
/// read and close /dev/urandom on every call: three system calls, 2.2% of a claim +
/// complete's server time (docs/performance.md). Same source, same strength; no state is
/// kept, so nothing is shared across the backends the postmaster forks. Where the call is
/// unavailable (not Linux, or a kernel before 3.17), PostgreSQL's own is used.
fn random_bytes(b: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        let mut filled = 0;
        while filled < b.len() {
            // SAFETY: the pointer and length describe the unfilled tail of `b`, a buffer
            // borrowed mutably for this function; getrandom writes at most that many bytes.
            let n =
                unsafe { libc::getrandom(b[filled..].as_mut_ptr().cast(), b.len() - filled, 0) };
            if n > 0 {
                filled += n as usize;
                continue;
            }
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // ENOSYS or anything unexpected: PostgreSQL's own source, below.
            break;
        }
        if filled == b.len() {
            return;
        }
    }
    // SAFETY: pg_strong_random writes exactly `b.len()` bytes to the pointer, and `b` is
    // borrowed mutably for the call.
    let ok = unsafe { pg_sys::pg_strong_random(b.as_mut_ptr().cast(), b.len()) };
    if !ok {
        pgrx::error!("pg_idempotency: could not generate random bytes");
    }
}
