//! Requests and responses as jsonb datums.
//!
//! A request is canonicalised from the text form of its jsonb (never through pgrx's
//! conversion to a Rust value, which panics on `1e400` and on deep nesting), so SQL and the
//! Rust client compute the same bytes and the same SHA-256 (docs/canonical-json.md).

use std::borrow::Cow;
use std::ffi::CStr;

use pgrx::pg_sys;

use crate::error::{ErrorKind, IdemError, IdemResult};
use crate::gucs;

/// The jsonb's text, as UTF-8 whatever the database encoding.
pub(crate) fn jsonb_text(jsonb: pg_sys::Datum) -> String {
    // SAFETY: `jsonb` is the datum of an argument declared jsonb, and jsonb_out takes one
    // jsonb and uses neither flinfo nor a collation. It returns a NUL-terminated string
    // palloc'd in the current memory context, which lives until after this function has
    // copied it into a String.
    let text: &CStr =
        unsafe { pgrx::direct_function_call::<&CStr>(pg_sys::jsonb_out, &[Some(jsonb)]) }
            .unwrap_or_default();
    let bytes = text.to_bytes();
    let utf8: Cow<'_, [u8]> =
        // SAFETY: reads the encoding of the database this backend is connected to.
        if unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32 {
            Cow::Borrowed(bytes)
        } else {
            // SAFETY: `text` is a NUL-terminated string of `bytes.len()` bytes, alive for the
            // call; the result is that string itself or a NUL-terminated palloc'd
            // conversion (an unconvertible character is an error, not a bad pointer).
            let converted = unsafe {
                pg_sys::pg_server_to_any(
                    text.as_ptr(),
                    bytes.len() as i32,
                    pg_sys::pg_enc::PG_UTF8 as i32,
                )
            };
            // SAFETY: `converted` is NUL-terminated and valid until the memory context is
            // reset, long after this copy.
            Cow::Owned(unsafe { CStr::from_ptr(converted) }.to_bytes().to_vec())
        };
    String::from_utf8_lossy(&utf8).into_owned()
}

fn uncanonicalizable(err: pg_idempotency_canon::CanonError) -> IdemError {
    IdemError::new(
        ErrorKind::Uncanonicalizable,
        "request has no canonical form",
        format!("{err}."),
        format!(
            "Requests are hashed in canonical JSON, which allows at most {} levels of nesting.",
            pg_idempotency_canon::MAX_DEPTH
        ),
    )
}

/// The canonical JSON text of a jsonb.
pub fn canonical(jsonb: pg_sys::Datum) -> IdemResult<String> {
    pg_idempotency_canon::canonical_text(&jsonb_text(jsonb)).map_err(uncanonicalizable)
}

/// SHA-256 of the request's canonical JSON: the request fingerprint, and (as lowercase hex)
/// the key of the HASH_INPUT strategy.
pub fn fingerprint(request: pg_sys::Datum) -> IdemResult<[u8; 32]> {
    canonical(request).map(|c| pg_idempotency_canon::sha256(&c))
}

pub fn hash_key(fingerprint: &[u8; 32]) -> String {
    pg_idempotency_canon::key_of(fingerprint)
}

/// Refuses a response larger than `pg_idempotency.max_response_bytes`.
pub fn check_response_size(response: Option<pg_sys::Datum>) -> IdemResult<()> {
    let Some(datum) = response else { return Ok(()) };
    // SAFETY: `datum` is the non-NULL jsonb argument of the running call, a varlena (inline,
    // compressed or a toast pointer); toast_raw_datum_size only reads its header.
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
