//! The product's errors: one variant per kind, each with a stable SQLSTATE.
//!
//! pgrx can only raise the SQLSTATEs that PostgreSQL itself defines, and it rewrites any other
//! code that passes through Rust frames to XX000. Our codes live in class `IK`, so they are
//! raised here, from the outermost frame of a SQL-callable function, after every Rust value
//! of the call has been dropped (see `entry.rs`).

use std::ffi::{c_char, c_int, CStr, CString};

/// What went wrong, with what the caller needs to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemError {
    pub kind: ErrorKind,
    pub message: String,
    pub detail: String,
    pub hint: String,
}

/// The kinds and their SQLSTATEs are the protocol's, which the client maps back.
pub use pg_idempotency_protocol::ErrorCode as ErrorKind;

impl IdemError {
    pub fn new(
        kind: ErrorKind,
        message: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        IdemError {
            kind,
            message: message.into(),
            detail: detail.into(),
            hint: hint.into(),
        }
    }

    pub fn invalid(
        message: impl Into<String>,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self::new(ErrorKind::InvalidArgument, message, detail, hint)
    }
}

/// A refusal of the state machine, in the words protocol/src/refusal.rs gives every store.
impl From<pg_idempotency_protocol::refusal::Refusal> for IdemError {
    fn from(r: pg_idempotency_protocol::refusal::Refusal) -> Self {
        IdemError::new(r.code, r.message, r.detail, r.hint)
    }
}

pub type IdemResult<T> = Result<T, IdemError>;

const fn make_sqlstate(code: &str) -> c_int {
    let b = code.as_bytes();
    let mut out = 0;
    let mut i = 0;
    while i < 5 {
        out |= ((b[i] - b'0') as c_int & 0x3F) << (6 * i);
        i += 1;
    }
    out
}

// errstart/errfinish are not in pgrx's bindings on purpose; declaring them here is what pgrx
// itself does to raise its reports.
// SAFETY: these are elog.h's signatures, unchanged from PostgreSQL 13 to 18 (the variadic
// ones are only ever given a "%s" format and one C string).
unsafe extern "C-unwind" {
    fn errstart(elevel: c_int, domain: *const c_char) -> bool;
    fn errcode(sqlerrcode: c_int) -> c_int;
    fn errmsg(fmt: *const c_char, ...) -> c_int;
    fn errdetail(fmt: *const c_char, ...) -> c_int;
    fn errhint(fmt: *const c_char, ...) -> c_int;
    fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
}

fn c_text(s: String) -> CString {
    // Messages are ours; a NUL could only come from echoed input, which is cut there.
    let bytes: Vec<u8> = s.into_bytes().into_iter().take_while(|&b| b != 0).collect();
    CString::new(bytes).unwrap_or_default()
}

/// Raises `err` as a PostgreSQL ERROR. Never returns.
///
/// # Safety
/// Must be called from a frame that Rust does not need to unwind: every value with a
/// destructor in the calling frames must already be dropped, because this longjmps.
pub unsafe fn raise(err: IdemError, function: &'static CStr) -> ! {
    let code = make_sqlstate(err.kind.sqlstate());
    let message = c_text(err.message);
    let detail = c_text(err.detail);
    let hint = c_text(err.hint);
    // SAFETY: each format is "%s" with one NUL-terminated argument, and errmsg, errdetail and
    // errhint copy the formatted text into ErrorContext at once, so the CStrings may go
    // before errfinish (they must: errfinish does not return, and would leak them).
    // errfinish keeps the function name's pointer, which is 'static. Nothing else in this
    // frame has a destructor, and the caller promises the same of its frames.
    unsafe {
        if errstart(pgrx::PgLogLevel::ERROR as c_int, std::ptr::null()) {
            errcode(code);
            // The formatted strings are copied into the error's own memory here.
            errmsg(c"%s".as_ptr(), message.as_ptr());
            if !detail.is_empty() {
                errdetail(c"%s".as_ptr(), detail.as_ptr());
            }
            if !hint.is_empty() {
                errhint(c"%s".as_ptr(), hint.as_ptr());
            }
            drop(message);
            drop(detail);
            drop(hint);
            // The location names the SQL function; a Rust line number would say nothing to a user.
            errfinish(std::ptr::null(), 0, function.as_ptr());
        }
        // errstart is always true at ERROR, and errfinish does not return at ERROR.
        std::hint::unreachable_unchecked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstate_packing_matches_postgres() {
        // MAKE_SQLSTATE('2','2','0','2','3'), as ERRCODE_INVALID_PARAMETER_VALUE.
        assert_eq!(
            make_sqlstate("22023"),
            pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE as c_int
        );
        assert_eq!(
            make_sqlstate("40001"),
            pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE as c_int
        );
    }
}
