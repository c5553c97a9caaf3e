//! Per-scope policies: defaults that every caller of a scope obeys, whatever its language.
//! A call's own arguments override its scope's policy, which overrides the GUC defaults.

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::{pg_sys, IntoDatum};

use crate::args;
use crate::call_args::{DropPolicyArgs, SetPolicyArgs};
use crate::clock;
use crate::entry::{composite, Args};
use crate::error::IdemResult;
use crate::policy_cache;
use crate::relations;
use crate::roles;

const UPSERT: &str = "INSERT INTO idempotency.policies AS p \
        (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by, \
         unresolved_ttl) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
     ON CONFLICT (scope) DO UPDATE SET ttl = excluded.ttl, lease = excluded.lease, \
        on_cache_hit = excluded.on_cache_hit, cache_failures = excluded.cache_failures, \
        on_mismatch = excluded.on_mismatch, updated_at = excluded.updated_at, \
        updated_by = excluded.updated_by, unresolved_ttl = excluded.unresolved_ttl";

/// The same for a schema before 0.8.0, whose policies have no unresolved_ttl (the library
/// serves it until its update).
const UPSERT_BEFORE_0_8: &str = "INSERT INTO idempotency.policies AS p \
        (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (scope) DO UPDATE SET ttl = excluded.ttl, lease = excluded.lease, \
        on_cache_hit = excluded.on_cache_hit, cache_failures = excluded.cache_failures, \
        on_mismatch = excluded.on_mismatch, updated_at = excluded.updated_at, \
        updated_by = excluded.updated_by";

const DELETE: &str =
    "DELETE FROM idempotency.policies WHERE scope OPERATOR(pg_catalog.=) $1 RETURNING scope";

/// A parameter of type `oid`, or its NULL; `T` must be that type's Rust form.
fn opt<T: IntoDatum>(v: Option<T>, oid: pg_sys::Oid) -> DatumWithOid<'static> {
    match v {
        // SAFETY: every caller in this file pairs a value with its own type (an Interval with
        // INTERVALOID, a String with TEXTOID, a bool with BOOLOID), so the statement reads
        // the datum as what it is.
        Some(v) => unsafe { DatumWithOid::new(v, oid) },
        None => DatumWithOid::null_oid(oid),
    }
}

/// `idem_set_policy(scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch,
/// unresolved_ttl)`: sets
/// (replaces) the scope's policy; a NULL field leaves that setting to the defaults.
pub fn idem_set_policy(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = SetPolicyArgs::read(a);
    let scope = args::scope(given.scope)?;
    let ttl = args::ttl(given.ttl)?;
    let lease = args::lease(given.lease)?;
    if let (Some(l), Some(t)) = (lease, ttl) {
        args::effective_lease(Some(l), None, t)?;
    }
    let on_cache_hit = given.on_cache_hit;
    args::on_cache_hit(on_cache_hit.as_deref())?;
    let cache_failures = given.cache_failures;
    let on_mismatch = given.on_mismatch;
    args::on_mismatch(on_mismatch.as_deref())?;
    let unresolved_ttl = args::unresolved_ttl(given.unresolved_ttl)?;

    let now = clock::now();
    let owner = roles::session_role();
    Spi::connect_mut(|client| {
        let params = [
            scope.as_str().into(),
            opt(ttl.map(args::micros_interval), pg_sys::INTERVALOID),
            opt(lease.map(args::micros_interval), pg_sys::INTERVALOID),
            opt(on_cache_hit.clone(), pg_sys::TEXTOID),
            opt(cache_failures, pg_sys::BOOLOID),
            opt(on_mismatch.clone(), pg_sys::TEXTOID),
            // SAFETY: a timestamptz is an int64 of microseconds passed by value, as `now`.
            unsafe { DatumWithOid::new(now, pg_sys::TIMESTAMPTZOID) },
            // SAFETY: a regrole is a role's OID passed by value, as `owner`.
            unsafe { DatumWithOid::new(owner, pg_sys::REGROLEOID) },
            opt(
                unresolved_ttl.map(args::micros_interval),
                pg_sys::INTERVALOID,
            ),
        ];
        let current = relations::oids().schema >= relations::SchemaVersion::V0_8;
        let (statement, params) = if current {
            (UPSERT, &params[..])
        } else {
            (UPSERT_BEFORE_0_8, &params[..8])
        };
        client
            .update(statement, None, params)
            .unwrap_or_else(|e| panic!("pg_idempotency: cannot store policy: {e}"));
    });
    policy_cache::invalidate();
    let mut row = vec![
        scope.as_str().into_datum(),
        ttl.map(args::micros_interval).into_datum(),
        lease.map(args::micros_interval).into_datum(),
        on_cache_hit.into_datum(),
        cache_failures.into_datum(),
        on_mismatch.into_datum(),
    ];
    // Before its update, a 0.7.0 schema's function has no unresolved_ttl column.
    if relations::oids().schema >= relations::SchemaVersion::V0_8 {
        row.push(unresolved_ttl.map(args::micros_interval).into_datum());
    }
    row.push(Some(pg_sys::Datum::from(now)));
    row.push(Some(pg_sys::Datum::from(owner)));
    Ok(composite(a, &row))
}

/// `idem_drop_policy(scope)`: removes the scope's policy; true when there was one.
pub fn idem_drop_policy(a: &Args) -> IdemResult<pg_sys::Datum> {
    let scope = args::scope(DropPolicyArgs::read(a).scope)?;
    let dropped = Spi::connect_mut(|client| {
        !client
            .update(DELETE, None, &[scope.as_str().into()])
            .unwrap_or_else(|e| panic!("pg_idempotency: cannot drop policy: {e}"))
            .is_empty()
    });
    policy_cache::invalidate();
    Ok(pg_sys::Datum::from(dropped))
}
