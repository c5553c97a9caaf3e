//! Look at a record, or forget it: a role its own, an admin anyone's.

use pgrx::{pg_sys, IntoDatum};

use crate::args::{self, micros_interval};
use crate::call_args::{ForgetArgs, LookupArgs};
use crate::clock;
use crate::entry::{null, rows, Args};
use crate::error::IdemResult;
use crate::roles;
use crate::store::{self, Id};

pub fn idem_lookup(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = LookupArgs::read(a);
    let scope = args::scope(given.scope)?;
    let key = args::key(given.key)?;
    let owner = roles::acting_owner(given.owner)?;
    let now = clock::now();
    let id = Id {
        scope: &scope,
        key: &key,
        owner,
    };
    let record = store::read(&id).0.filter(|r| r.is_live(now));
    let ts = |m: i64| Some(pg_sys::Datum::from(m));
    let found: Vec<_> = record
        .into_iter()
        .map(|r| {
            vec![
                scope.as_str().into_datum(),
                key.as_str().into_datum(),
                r.state.as_sql().into_datum(),
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
    let given = ForgetArgs::read(a);
    let scope = args::scope(given.scope)?;
    let key = args::key(given.key)?;
    let owner = roles::acting_owner(given.owner)?;
    let id = Id {
        scope: &scope,
        key: &key,
        owner,
    };
    Ok(pg_sys::Datum::from(store::forget(&id, clock::now())))
}

/// `idempotency._idem_visible_owner()`: whose rows idem_metrics shows the caller (NULL:
/// every owner's).
pub fn idem_visible_owner(a: &Args) -> IdemResult<pg_sys::Datum> {
    Ok(match roles::visible_owner()? {
        Some(owner) => pg_sys::Datum::from(owner),
        None => null(a),
    })
}
