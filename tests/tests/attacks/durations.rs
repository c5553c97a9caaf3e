//! Extreme durations in every place that takes one: idem_begin's ttl, lease and wait,
//! idem_extend's lease, idem_set_policy's ttl and lease. Each is refused with 22023 and
//! nothing written, or accepted with a lease and an expiry where the duration says.
//! (behaviour/bounds.rs has idem_begin's ttl against days and hours that overflow nothing.)

use pg_idempotency_tests::attack::{storage_picture, Db};
use pg_idempotency_tests::*;

/// Where a duration goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Place {
    BeginTtl,
    BeginLease,
    BeginWait,
    ExtendLease,
    PolicyTtl,
    PolicyLease,
}

const PLACES: [Place; 6] = [
    Place::BeginTtl,
    Place::BeginLease,
    Place::BeginWait,
    Place::ExtendLease,
    Place::PolicyTtl,
    Place::PolicyLease,
];

/// The durations, as SQL expressions (constants of this file, never user input).
const ZERO: &str = "interval '0'";
const NEGATIVE: &str = "interval '-1 second'";
const NEGATIVE_NORMALISED: &str = "interval '1 month -31 days'";
const MICROSECOND: &str = "interval '1 microsecond'";
const JUST_OVER_MAX: &str = "interval '30 days 1 microsecond'";
const EONS: &str = "interval '200000 years'";
const BILLION_YEARS: &str = "make_interval(years => 1000000000)";
const INFINITY: &str = "interval 'infinity'";
const MINUS_INFINITY: &str = "interval '-infinity'";

/// What a call with `d` at `place` must do: Ok(()) accepted, Err(SQLSTATE) refused.
fn expected(c: &mut Client, d: &str, place: Place) -> Result<(), String> {
    // Where PostgreSQL itself cannot compute the value (make_interval past its range on
    // 17 and later: 22008), that is the refusal, before our function runs.
    if let Err(e) = c.query_one(&format!("SELECT {d}"), &[]) {
        return Err(sqlstate(&e));
    }
    match d {
        MICROSECOND => Ok(()),
        ZERO if place == Place::BeginWait => Ok(()), // wait may be 0: answer at once
        _ => Err("22023".into()),
    }
}

/// The SQL of a call with `d` at `place`, returning whether the times it answered are
/// sane: each lease and expiry is the duration from a moment during the call, and the
/// lease never outlasts the record. $1 scope, $2 key, $3 fence.
fn call_sql(d: &str, place: Place) -> String {
    let during = |t: &str, len: &str| {
        format!("({t} - {len}) BETWEEN statement_timestamp() AND clock_timestamp()")
    };
    let begin = |args: &str, check: String| {
        format!(
            "SELECT $3::bigint IS NOT NULL AND b.outcome = 'claimed' AND b.lease_until <= b.expires_at AND {check} \
             FROM idem_begin($1, $2{args}) b"
        )
    };
    match place {
        Place::BeginTtl => begin(
            &format!(", ttl => {d}"),
            during("b.expires_at", d) + " AND " + &during("b.lease_until", d),
        ),
        Place::BeginLease => begin(
            &format!(", lease => {d}"),
            during("b.lease_until", d) + " AND " + &during("b.expires_at", "interval '1 hour'"),
        ),
        Place::BeginWait => begin(
            &format!(", wait => {d}"),
            during("b.lease_until", "interval '1 minute'"),
        ),
        Place::ExtendLease => format!(
            "SELECT {} AND e.lease_until <= e.expires_at FROM idem_extend($1, $2, $3, {d}) e",
            during("e.lease_until", d)
        ),
        Place::PolicyTtl => format!(
            "SELECT p.ttl = {d} AND p.lease IS NULL AND $2::text IS NOT NULL AND $3::bigint IS NOT NULL \
             FROM idem_set_policy($1, ttl => {d}) p"
        ),
        Place::PolicyLease => format!(
            "SELECT p.lease = {d} AND p.ttl IS NULL AND $2::text IS NOT NULL AND $3::bigint IS NOT NULL \
             FROM idem_set_policy($1, lease => {d}) p"
        ),
    }
}

/// Runs `d` at every place in a scope of its own and checks what each did.
fn check_everywhere(c: &mut Client, label: &str, d: &str) {
    for place in PLACES {
        let what = format!("{label} ({d}) as {place:?}");
        let sc = scope("durations");
        // A held claim for idem_extend (default ttl 1 hour), and a policy to keep.
        let fence = begin(c, &sc, "held").fence.unwrap();
        c.query_one(
            "SELECT * FROM idem_set_policy($1 || '-kept', ttl => '2 hours')",
            &[&sc],
        )
        .unwrap();
        let key = if place == Place::ExtendLease {
            "held"
        } else {
            "new"
        };
        let before = storage_picture(c);
        let got = c.query_one(&call_sql(d, place), &[&sc, &key, &fence]);
        match expected(c, d, place) {
            Ok(()) => {
                let sane: bool = got.unwrap_or_else(|e| panic!("{what} refused: {e}")).get(0);
                assert!(sane, "{what}: the times it answered are not the duration's");
            }
            Err(state) => {
                let e = got.expect_err(&what);
                assert_eq!(sqlstate(&e), state, "{what}: {e}");
                assert_eq!(storage_picture(c), before, "{what} wrote something");
            }
        }
    }
}

#[test]
fn zero_and_negative_durations() {
    let db = Db::fresh("durations_nonpositive");
    let mut c = db.connect();
    check_everywhere(&mut c, "zero", ZERO);
    check_everywhere(&mut c, "negative", NEGATIVE);
    check_everywhere(&mut c, "negative once normalised", NEGATIVE_NORMALISED);
    drop(c);
}

#[test]
fn one_microsecond_is_a_duration() {
    let db = Db::fresh("durations_microsecond");
    let mut c = db.connect();
    check_everywhere(&mut c, "one microsecond", MICROSECOND);
    // A policy's microsecond ttl is what a call without its own ttl gets.
    let sc = scope("micro-policy");
    c.query_one(
        "SELECT * FROM idem_set_policy($1, ttl => '1 microsecond')",
        &[&sc],
    )
    .unwrap();
    let sane: bool = c
        .query_one(
            "SELECT (b.expires_at - interval '1 microsecond') \
                    BETWEEN statement_timestamp() AND clock_timestamp() \
                    AND b.lease_until <= b.expires_at \
             FROM idem_begin($1, 'k') b",
            &[&sc],
        )
        .unwrap()
        .get(0);
    assert!(sane, "the policy's 1 microsecond ttl was not applied");
    drop(c);
}

#[test]
fn durations_beyond_max_ttl() {
    let db = Db::fresh("durations_huge");
    let mut c = db.connect();
    check_everywhere(&mut c, "just over max_ttl", JUST_OVER_MAX);
    check_everywhere(&mut c, "200000 years", EONS);
    // PostgreSQL 15 wraps this to a negative interval (refused as not positive); 17 and
    // later refuse to compute it (22008): expected() tells which.
    check_everywhere(&mut c, "a billion years", BILLION_YEARS);
    drop(c);
}

#[test]
fn infinite_durations() {
    let db = Db::fresh("durations_infinite");
    let mut c = db.connect();
    if server_major(&mut c) < 17 {
        skip(
            Skip::NotApplicable,
            "interval 'infinity' exists from PostgreSQL 17 on (this server cannot express it)",
        );
        drop(c);
        return;
    }
    check_everywhere(&mut c, "infinity", INFINITY);
    check_everywhere(&mut c, "minus infinity", MINUS_INFINITY);
    drop(c);
}
