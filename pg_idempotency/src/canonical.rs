//! `idem_canonical` and `idem_hash`: canonical JSON in SQL.

use pgrx::{pg_sys, IntoDatum};

use crate::call_args::{CanonicalArgs, HashArgs};
use crate::entry::Args;
use crate::error::IdemResult;
use crate::request;

/// Both functions are STRICT: PostgreSQL never calls them with NULL.
fn request_arg(request: Option<pg_sys::Datum>) -> pg_sys::Datum {
    request.unwrap_or_else(|| pgrx::error!("pg_idempotency: unexpected NULL argument"))
}

pub fn idem_canonical(a: &Args) -> IdemResult<pg_sys::Datum> {
    let text = request::canonical(request_arg(CanonicalArgs::read(a).request))?;
    Ok(text
        .as_str()
        .into_datum()
        .unwrap_or_else(|| pg_sys::Datum::from(0usize)))
}

pub fn idem_hash(a: &Args) -> IdemResult<pg_sys::Datum> {
    let hash = request::fingerprint(request_arg(HashArgs::read(a).request))?;
    Ok((&hash[..])
        .into_datum()
        .unwrap_or_else(|| pg_sys::Datum::from(0usize)))
}
