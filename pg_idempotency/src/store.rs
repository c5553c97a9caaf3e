//! The records table, read and written through saved SPI plans.
//!
//! Every statement names its objects with their schema, operators included, so no caller's
//! `search_path` can redirect it; values (times, fences, keys) are computed before the
//! statement and passed as parameters, never as volatile calls inside it (which a
//! table distributed by key, as on Citus, would refuse).

use std::cell::Cell;

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use pgrx::{pg_sys, PgOid};

use crate::args::micros_interval;
use crate::clock::Micros;
use crate::metrics::Counter;
use crate::policy_cache::{self, ScopePolicy};
use crate::record_columns::{self, Statement, Values};
use crate::relations::SchemaVersion;
use crate::{fetch, relations};

pub use crate::record::{Record, State};

/// The scope's policy as the read statement selects it, before the record's columns.
/// Since 0.8.0 the policy has its unresolved bound too (the record's columns then start
/// one later).
const READ_POLICY_COLUMNS: &str = "p.ttl, p.lease, p.on_cache_hit, p.cache_failures, p.on_mismatch";
const READ_POLICY_COLUMNS_0_8: &str =
    "p.ttl, p.lease, p.on_cache_hit, p.cache_failures, p.on_mismatch, p.unresolved_ttl";

/// The record's key in a statement: scope `$1`, key `$2`, and the owner in parameter
/// `$owner`.
fn where_key(owner: usize) -> String {
    format!(
        "scope OPERATOR(pg_catalog.=) $1 AND key OPERATOR(pg_catalog.=) $2 \
         AND owner OPERATOR(pg_catalog.=) ${owner}"
    )
}

/// The record held by fence `$3`.
fn where_held(owner: usize) -> String {
    format!(
        "{} AND fence OPERATOR(pg_catalog.=) $3 AND state OPERATOR(pg_catalog.=) 'in_progress'",
        where_key(owner)
    )
}

struct Plans {
    read: OwnedPreparedStatement,
    complete_at: OwnedPreparedStatement,
    insert: OwnedPreparedStatement,
    claim_again: OwnedPreparedStatement,
    complete: OwnedPreparedStatement,
    delete_held: OwnedPreparedStatement,
    extend: OwnedPreparedStatement,
    forget: OwnedPreparedStatement,
}

thread_local! {
    /// The saved plans, and the schema of the records they were made for. Leaked: a saved
    /// plan lives as long as the backend, and when an update of the extension changes the
    /// table under a running backend, a statement of the old plans may still be running.
    static PLANS: Cell<Option<(SchemaVersion, &'static Plans)>> = const { Cell::new(None) };
}

fn oids(list: &[pg_sys::Oid]) -> Vec<PgOid> {
    list.iter().map(|&o| PgOid::from(o)).collect()
}

fn prepare(client: &SpiClient<'_>, sql: &str, types: &[pg_sys::Oid]) -> OwnedPreparedStatement {
    client
        .prepare_mut(sql, &oids(types))
        .unwrap_or_else(|e| panic!("pg_idempotency: cannot prepare statement: {e}"))
        .keep()
}

fn build_plans(client: &SpiClient<'_>, schema: SchemaVersion) -> Plans {
    use pg_sys::{
        BOOLOID, BYTEAOID, INT4OID, INT8OID, INTERVALOID, JSONBOID, REGROLEOID, TEXTOID, TIDOID,
        TIMESTAMPTZOID, UUIDOID,
    };
    let read_columns = record_columns::of(schema)
        .iter()
        .map(|c| format!("r.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    // The owner is the last parameter of every statement. The claim's time follows the
    // claim's token and takeover flag in the statements that claim; unused before 0.5.0.
    let (time_column, insert_time, set_time) = if schema >= SchemaVersion::V0_5 {
        (", claimed_at", ", $13", ", claimed_at = $17")
    } else {
        ("", "", "")
    };
    // Since 0.8.0 a claim keeps its unresolved bound (the parameter after the claim's
    // time); a completion keeps it for a mark alone, moved from the lease's end to the
    // completion; an extension moves it with the lease.
    let unresolved = schema >= SchemaVersion::V0_8;
    let policy_columns = if unresolved {
        READ_POLICY_COLUMNS_0_8
    } else {
        READ_POLICY_COLUMNS
    };
    let (bound_column, insert_bound, set_bound) = if unresolved {
        (", unresolved_until", ", $14", ", unresolved_until = $18")
    } else {
        ("", "", "")
    };
    // The client's mark (unrecorded, outcome_unknown) is recognised once, by the SQL's own
    // `_idem_mark`, and answered (RETURNING) so that the completion counts it; before 0.8.0
    // there is neither the function nor a table to count marks in.
    let (completed_bound, mark_from, mark_returned) = if unresolved {
        (
            ", unresolved_until = CASE WHEN m.mark IS NOT NULL \
                 THEN $6 OPERATOR(pg_catalog.+) (unresolved_until OPERATOR(pg_catalog.-) lease_until) END",
            " FROM (SELECT idempotency._idem_mark($5) AS mark) AS m",
            " RETURNING m.mark",
        )
    } else {
        ("", "", " RETURNING NULL::pg_catalog.text")
    };
    // Since 0.9.0 a claim and an extension keep the length of the lease they took (their
    // statements' last parameter; passed, unused, to an older schema's).
    let lengths = schema >= SchemaVersion::V0_9;
    let (length_column, insert_length, set_length, extended_length) = if lengths {
        (
            ", lease_length",
            ", $15",
            ", lease_length = $19",
            ", lease_length = $7",
        )
    } else {
        ("", "", "", "")
    };
    let extended_bound = if unresolved {
        ", unresolved_until = $4 OPERATOR(pg_catalog.+) (unresolved_until OPERATOR(pg_catalog.-) lease_until)"
    } else {
        ""
    };
    let forgotten_until = if unresolved {
        "GREATEST(expires_at, unresolved_until)"
    } else {
        "expires_at"
    };
    Plans {
        read: prepare(
            client,
            // Always one row: the scope's policy if any, and the record if any.
            &format!(
                "SELECT {policy_columns}, {read_columns} FROM (SELECT) AS one \
                 LEFT JOIN idempotency.records r \
                     ON r.scope OPERATOR(pg_catalog.=) $1 AND r.key OPERATOR(pg_catalog.=) $2 \
                     AND r.owner OPERATOR(pg_catalog.=) $3 \
                 LEFT JOIN idempotency.policies p ON p.scope OPERATOR(pg_catalog.=) $1"
            ),
            &[TEXTOID, TEXTOID, REGROLEOID],
        ),
        insert: prepare(
            client,
            &format!(
                "INSERT INTO idempotency.records AS r (scope, key, state, fence, attempt, \
                     fingerprint, upstream_key, created_at, lease_until, expires_at, ttl, owner, \
                     claim_token, recovered{time_column}{bound_column}{length_column}) \
                 VALUES ($1, $2, 'in_progress', $3, 1, $4, $5, $6, $7, $8, $9, $10, $11, $12{insert_time}{insert_bound}{insert_length}) \
                 ON CONFLICT (scope, key, owner) DO NOTHING RETURNING r.fence"
            ),
            &[TEXTOID, TEXTOID, INT8OID, BYTEAOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INTERVALOID, REGROLEOID, UUIDOID, BOOLOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INTERVALOID],
        ),
        claim_again: prepare(
            client,
            &format!(
                "UPDATE idempotency.records SET state = 'in_progress', fence = $4, attempt = $5, \
                     fingerprint = $6, upstream_key = $7, response = NULL, created_at = $8, \
                     completed_at = NULL, lease_until = $9, expires_at = $10, ttl = $11, owner = $12, \
                     claim_token = $15, recovered = $16{set_time}{set_bound}{set_length} \
                 WHERE {} \
                     AND fence OPERATOR(pg_catalog.=) $3 AND state OPERATOR(pg_catalog.=) $13 \
                     AND COALESCE(lease_until, '-infinity'::pg_catalog.timestamptz) OPERATOR(pg_catalog.=) $14",
                where_key(12)
            ),
            &[TEXTOID, TEXTOID, INT8OID, INT8OID, INT4OID, BYTEAOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INTERVALOID, REGROLEOID, TEXTOID, TIMESTAMPTZOID, UUIDOID, BOOLOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INTERVALOID],
        ),
        complete: prepare(
            client,
            &format!(
                "UPDATE idempotency.records SET state = $4, response = $5, completed_at = $6, \
                     lease_until = NULL, expires_at = $7{completed_bound}{mark_from} WHERE {}{mark_returned}",
                where_held(8)
            ),
            &[TEXTOID, TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID],
        ),
        // The same, at the row version that was read (a TID scan instead of an index probe;
        // if the row changed meanwhile, the update follows it and checks the guard again).
        complete_at: prepare(
            client,
            &format!(
                "UPDATE idempotency.records SET state = $4, response = $5, completed_at = $6, \
                     lease_until = NULL, expires_at = $7{completed_bound}{mark_from} \
                 WHERE ctid OPERATOR(pg_catalog.=) $9 AND {}{mark_returned}",
                where_held(8)
            ),
            &[TEXTOID, TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, TIDOID],
        ),
        delete_held: prepare(
            client,
            &format!("DELETE FROM idempotency.records WHERE {}", where_held(4)),
            &[TEXTOID, TEXTOID, INT8OID, REGROLEOID],
        ),
        extend: prepare(
            client,
            &format!(
                "UPDATE idempotency.records SET lease_until = $4, expires_at = $5{extended_bound}{extended_length} WHERE {}",
                where_held(6)
            ),
            &[TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID, INTERVALOID],
        ),
        forget: prepare(
            client,
            &format!(
                "DELETE FROM idempotency.records WHERE {} RETURNING {forgotten_until}",
                where_key(3)
            ),
            &[TEXTOID, TEXTOID, REGROLEOID],
        ),
    }
}

/// The saved plans for the records' current schema, made on first use.
fn plans(client: &SpiClient<'_>) -> &'static Plans {
    let schema = relations::oids().schema;
    match PLANS.get() {
        Some((made_for, plans)) if made_for == schema => plans,
        _ => {
            // An update of the extension changes the table under a running backend: its
            // statements are made again for the new schema. The old ones stay (leaked, once
            // per backend), in case a statement of theirs is still running.
            let plans: &'static Plans = Box::leak(Box::new(build_plans(client, schema)));
            PLANS.set(Some((schema, plans)));
            plans
        }
    }
}

fn run<'conn>(
    client: &mut SpiClient<'conn>,
    pick: fn(&Plans) -> &OwnedPreparedStatement,
    args: &[DatumWithOid<'_>],
) -> SpiTupleTable<'conn> {
    let plan = pick(plans(client));
    client
        .update(plan, None, args)
        .unwrap_or_else(|e| panic!("pg_idempotency: statement failed: {e}"))
}

/// Runs one write through SPI (connected for it alone: a replay never connects) and returns
/// how many rows it wrote.
fn written(pick: fn(&Plans) -> &OwnedPreparedStatement, args: &[DatumWithOid<'_>]) -> usize {
    Spi::connect_mut(|client| run(client, pick, args).len())
}

fn ts(m: Micros) -> DatumWithOid<'static> {
    // SAFETY: a timestamptz is an int64 of microseconds since 2000 passed by value: a Micros.
    unsafe { DatumWithOid::new(m, pg_sys::TIMESTAMPTZOID) }
}

fn bytes_opt(b: Option<&[u8]>) -> DatumWithOid<'_> {
    match b {
        Some(b) => DatumWithOid::from(b),
        None => DatumWithOid::null_oid(pg_sys::BYTEAOID),
    }
}

fn owner(oid: pg_sys::Oid) -> DatumWithOid<'static> {
    // SAFETY: a regrole is a role's OID passed by value.
    unsafe { DatumWithOid::new(oid, pg_sys::REGROLEOID) }
}

fn ttl_arg(ttl: i64) -> DatumWithOid<'static> {
    DatumWithOid::from(micros_interval(ttl))
}

fn col_ts(t: &SpiTupleTable<'_>, n: usize) -> Option<Micros> {
    col::<pgrx::datum::TimestampWithTimeZone>(t, n).map(Micros::from)
}

fn col<T: FromDatum + IntoDatum>(t: &SpiTupleTable<'_>, n: usize) -> Option<T> {
    t.get::<T>(n)
        .unwrap_or_else(|e| panic!("pg_idempotency: bad column {n}: {e}"))
}

/// Which record: a (scope, key) in its owner's key space.
#[derive(Clone, Copy)]
pub struct Id<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    pub owner: pg_sys::Oid,
}

impl Id<'_> {
    /// Scope and key as the first two parameters of a statement (the owner is the last).
    fn params(&self) -> [DatumWithOid<'_>; 2] {
        [self.scope.into(), self.key.into()]
    }
}

/// The record of `id`, if any, and the scope's policy: an index probe and the backend's
/// copy of the policies, no statement.
pub fn read(id: &Id<'_>) -> (Option<Record>, ScopePolicy) {
    let oids = relations::oids();
    if oids.distributed {
        return Spi::connect_mut(|client| read_by_statement(client, id));
    }
    let keys = [
        fetch::Key::Text(id.scope),
        fetch::Key::Text(id.key),
        fetch::Key::Oid(id.owner),
    ];
    let record = fetch::by_key(
        oids.records,
        oids.records_pkey,
        &keys,
        record_columns::of(oids.schema),
        |row| record_columns::record(row, oids.schema),
    );
    (record, policy_cache::of(id.scope))
}

fn col_micros(t: &SpiTupleTable<'_>, n: usize) -> Option<i64> {
    col::<pgrx::datum::Interval>(t, n)
        .and_then(|iv| crate::args::interval_micros(&iv))
        .map(|us| us as i64)
}

/// The same read as a statement, for a table that only SQL reaches correctly: one
/// distributed by Citus, whose rows live in shards on other nodes.
fn read_by_statement(client: &mut SpiClient<'_>, id: &Id<'_>) -> (Option<Record>, ScopePolicy) {
    let [scope, key] = id.params();
    let table = run(client, |p| &p.read, &[scope, key, owner(id.owner)]);
    let t = table.first();
    let unresolved = relations::oids().schema >= SchemaVersion::V0_8;
    let policy = ScopePolicy {
        ttl: col_micros(&t, 1),
        lease: col_micros(&t, 2),
        on_cache_hit: col(&t, 3),
        cache_failures: col(&t, 4),
        on_mismatch: col(&t, 5),
        unresolved_ttl: if unresolved { col_micros(&t, 6) } else { None },
    };
    let row = Statement {
        table: &t,
        first: if unresolved { 7 } else { 6 },
    };
    let record = row
        .text(0)
        .is_some()
        .then(|| record_columns::record(&row, relations::oids().schema));
    (record, policy)
}

/// The values of a claim, computed before the statement that writes it.
pub struct Claim<'a> {
    pub fence: i64,
    pub attempt: i32,
    pub fingerprint: Option<&'a [u8]>,
    pub upstream_key: pgrx::Uuid,
    pub created_at: Micros,
    pub lease_until: Micros,
    pub expires_at: Micros,
    pub ttl: i64,
    /// The caller's token for this attempt, if it gave one.
    pub claim_token: Option<pgrx::Uuid>,
    /// A takeover of a lapsed lease.
    pub recovered: bool,
    /// When this attempt claims.
    pub claimed_at: Micros,
    /// Until when the record stays past its ttl if its lease lapses: the lease's end plus
    /// the call's unresolved bound.
    pub unresolved_until: Micros,
    /// The lease's length, in microseconds.
    pub lease: i64,
}

fn uuid_opt(u: Option<pgrx::Uuid>) -> DatumWithOid<'static> {
    match u {
        Some(u) => u.into(),
        None => DatumWithOid::null_oid(pg_sys::UUIDOID),
    }
}

/// Claims an absent key: true when this call inserted the row.
pub fn insert(id: &Id<'_>, c: &Claim<'_>) -> bool {
    let [scope, key] = id.params();
    let args = [
        scope,
        key,
        c.fence.into(),
        bytes_opt(c.fingerprint),
        c.upstream_key.into(),
        ts(c.created_at),
        ts(c.lease_until),
        ts(c.expires_at),
        ttl_arg(c.ttl),
        owner(id.owner),
        uuid_opt(c.claim_token),
        c.recovered.into(),
        ts(c.claimed_at),
        ts(c.unresolved_until),
        ttl_arg(c.lease),
    ];
    written(|p| &p.insert, &args) > 0
}

/// Claims a row that exists (expired, lapsed, or a failure to rerun) if it is still as it
/// was read (same fence, state and lease: a completion or an extension in between wins):
/// true when this call won.
pub fn claim_again(id: &Id<'_>, seen: &Record, c: &Claim<'_>) -> bool {
    let [scope, key] = id.params();
    let args = [
        scope,
        key,
        seen.fence.into(),
        c.fence.into(),
        c.attempt.into(),
        bytes_opt(c.fingerprint),
        c.upstream_key.into(),
        ts(c.created_at),
        ts(c.lease_until),
        ts(c.expires_at),
        ttl_arg(c.ttl),
        owner(id.owner),
        seen.state.as_sql().into(),
        ts(seen.lease_until.unwrap_or(i64::MIN)),
        uuid_opt(c.claim_token),
        c.recovered.into(),
        ts(c.claimed_at),
        ts(c.unresolved_until),
        ttl_arg(c.lease),
    ];
    written(|p| &p.claim_again, &args) == 1
}

/// A completion's values, computed before the statement that writes it.
pub struct Completion {
    pub state: State,
    pub response: Option<pg_sys::Datum>,
    pub completed_at: Micros,
    pub expires_at: Micros,
}

/// What a completion wrote: whether the response is the client's mark, and which.
pub struct Completed {
    pub mark: Option<Counter>,
}

/// Records the result if `fence` still holds the record (read at `tid`, if known): None
/// when it did not.
pub fn complete(
    id: &Id<'_>,
    fence: i64,
    c: &Completion,
    tid: Option<pg_sys::ItemPointerData>,
) -> Option<Completed> {
    let response = match c.response {
        // SAFETY: `d` is idem_complete's response argument, declared jsonb, valid for the
        // call.
        Some(d) => unsafe { DatumWithOid::new(d, pg_sys::JSONBOID) },
        None => DatumWithOid::null_oid(pg_sys::JSONBOID),
    };
    let [scope, key] = id.params();
    let mut args = vec![
        scope,
        key,
        fence.into(),
        c.state.as_sql().into(),
        response,
        ts(c.completed_at),
        ts(c.expires_at),
        owner(id.owner),
    ];
    let pick: fn(&Plans) -> &OwnedPreparedStatement = match tid {
        Some(tid) => {
            args.push(DatumWithOid::from(tid));
            |p| &p.complete_at
        }
        None => |p| &p.complete,
    };
    Spi::connect_mut(|client| {
        let t = run(client, pick, &args);
        if t.len() != 1 {
            return None;
        }
        let mark: Option<String> = t
            .first()
            .get(1)
            .unwrap_or_else(|e| panic!("pg_idempotency: unexpected result shape: {e}"));
        Some(Completed {
            mark: mark.as_deref().and_then(Counter::of_mark),
        })
    })
}

pub fn delete_held(id: &Id<'_>, fence: i64) -> bool {
    let [scope, key] = id.params();
    written(
        |p| &p.delete_held,
        &[scope, key, fence.into(), owner(id.owner)],
    ) == 1
}

/// Extends the lease held by `fence` to `lease_until`, a lease `lease` long (microseconds).
pub fn extend(
    id: &Id<'_>,
    fence: i64,
    lease_until: Micros,
    expires_at: Micros,
    lease: i64,
) -> bool {
    let [scope, key] = id.params();
    let args = [
        scope,
        key,
        fence.into(),
        ts(lease_until),
        ts(expires_at),
        owner(id.owner),
        ttl_arg(lease),
    ];
    written(|p| &p.extend, &args) == 1
}

/// Removes the record; true when it was live.
pub fn forget(id: &Id<'_>, now: Micros) -> bool {
    let [scope, key] = id.params();
    Spi::connect_mut(|client| {
        let table = run(client, |p| &p.forget, &[scope, key, owner(id.owner)]);
        if table.is_empty() {
            return false;
        }
        col_ts(&table.first(), 1).is_some_and(|e| e > now)
    })
}
