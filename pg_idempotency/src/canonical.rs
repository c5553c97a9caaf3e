//! `idem_canonical` and `idem_hash`: canonical JSON in SQL.

use pgrx::{pg_sys, IntoDatum};

use crate::entry::Args;
use crate::error::IdemResult;
use crate::request;

fn request_arg(a: &Args) -> pg_sys::Datum {
    // Both functions are STRICT: PostgreSQL never calls them with NULL.
    a.datum(0)
        .unwrap_or_else(|| pgrx::error!("pg_idempotency: unexpected NULL argument"))
}

pub fn idem_canonical(a: &Args) -> IdemResult<pg_sys::Datum> {
    let text = request::canonical(request_arg(a))?;
    Ok(text
        .as_str()
        .into_datum()
        .unwrap_or_else(|| pg_sys::Datum::from(0usize)))
}

pub fn idem_hash(a: &Args) -> IdemResult<pg_sys::Datum> {
    let hash = request::fingerprint(request_arg(a))?;
    Ok((&hash[..])
        .into_datum()
        .unwrap_or_else(|| pg_sys::Datum::from(0usize)))
}
