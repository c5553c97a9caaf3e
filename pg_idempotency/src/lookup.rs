//! What an operator uses: look at a record, or forget it.

use pgrx::{pg_sys, IntoDatum};

use crate::args::{self, micros_interval};
use crate::clock;
use crate::entry::{rows, Args};
use crate::error::IdemResult;
use crate::store;

pub fn idem_lookup(a: &Args) -> IdemResult<pg_sys::Datum> {
    let scope = args::scope(a.get::<String>(0))?;
    let key = args::key(a.get::<String>(1))?;
    let now = clock::now();
    let record = store::read(&scope, &key).0.filter(|r| r.is_live(now));
    let ts = |m: i64| Some(pg_sys::Datum::from(m));
    let found: Vec<_> = record
        .into_iter()
        .map(|r| {
            vec![
                scope.as_str().into_datum(),
                key.as_str().into_datum(),
                r.state.as_str().into_datum(),
                r.fence.into_datum(),
                r.attempt.into_datum(),
                r.fingerprint.into_datum(),
                r.upstream_key.into_datum(),
                r.response,
                ts(r.created_at),
                r.completed_at.and_then(ts),
                r.lease_until.and_then(ts),
                ts(r.expires_at),
                micros_interval(r.ttl).into_datum(),
                Some(pg_sys::Datum::from(r.owner)),
            ]
        })
        .collect();
    Ok(rows(a, &found))
}

pub fn idem_forget(a: &Args) -> IdemResult<pg_sys::Datum> {
    let scope = args::scope(a.get::<String>(0))?;
    let key = args::key(a.get::<String>(1))?;
    let removed = store::forget(&scope, &key, clock::now());
    Ok(pg_sys::Datum::from(removed))
}
