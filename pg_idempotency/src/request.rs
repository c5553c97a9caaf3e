//! Requests and responses as jsonb datums, never converted to Rust values.

use pgrx::pg_sys;
use sha2::{Digest, Sha256};

use crate::error::{ErrorKind, IdemError, IdemResult};
use crate::gucs;

/// SHA-256 of the request's canonical text: the request fingerprint, and the key of the
/// HASH_INPUT strategy (as lowercase hex).
///
/// Interim canonical form: PostgreSQL's own jsonb text, which already sorts keys and drops
/// duplicates; canonical JSON (DESIGN 5) replaces it.
pub fn fingerprint(request: pg_sys::Datum) -> [u8; 32] {
    let text: &std::ffi::CStr = unsafe {
        pgrx::direct_function_call::<&std::ffi::CStr>(pg_sys::jsonb_out, &[Some(request)])
    }
    .unwrap_or_default();
    Sha256::digest(text.to_bytes()).into()
}

pub fn hash_key(fingerprint: &[u8; 32]) -> String {
    hex::encode(fingerprint)
}

/// Refuses a response larger than `pg_idempotency.max_response_bytes`.
pub fn check_response_size(response: Option<pg_sys::Datum>) -> IdemResult<()> {
    let Some(datum) = response else { return Ok(()) };
    let bytes = unsafe { pg_sys::toast_raw_datum_size(datum) } - pg_sys::VARHDRSZ;
    let max = gucs::max_response_bytes();
    if bytes > max {
        return Err(IdemError::new(
            ErrorKind::ResponseTooLarge,
            "response is too large",
            format!("The response takes {bytes} bytes as jsonb; the limit is {max}."),
            "Store a smaller response (a reference to the result instead of the result), or raise pg_idempotency.max_response_bytes.",
        ));
    }
    Ok(())
}
