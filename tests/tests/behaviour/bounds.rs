//! Interval bounds that only some PostgreSQL versions can even express.

use pg_idempotency_tests::*;

fn begin_with_ttl(c: &mut Client, ttl_sql: &str) -> Result<(), postgres::Error> {
    let scope = scope("bounds");
    c.query_one(
        &format!("SELECT outcome FROM idem_begin($1, 'k', ttl => {ttl_sql})"),
        &[&scope],
    )
    .map(|_| ())
}

#[test]
fn infinite_and_wrapped_durations_are_refused() {
    let mut c = connect();
    if server_major(&mut c) >= 17 {
        // Infinite intervals exist from PostgreSQL 17 on.
        for ttl in ["'infinity'::interval", "'-infinity'::interval"] {
            let e = begin_with_ttl(&mut c, ttl).unwrap_err();
            assert_eq!(sqlstate(&e), "22023", "{ttl}");
        }
        // make_interval refuses this itself, before our function runs.
        let e = begin_with_ttl(&mut c, "make_interval(years => 1000000000)").unwrap_err();
        assert_eq!(sqlstate(&e), "22008");
    } else {
        // PostgreSQL 15 wraps it into a negative interval, which we refuse.
        let wrapped: String = c
            .query_one("SELECT make_interval(years => 1000000000)::text", &[])
            .unwrap()
            .get(0);
        assert!(
            wrapped.starts_with('-'),
            "expected a wrapped interval, got {wrapped}"
        );
        let e = begin_with_ttl(&mut c, "make_interval(years => 1000000000)").unwrap_err();
        assert_eq!(sqlstate(&e), "22023");
    }
    // Days and hours that overflow nothing but exceed max_ttl.
    let e = begin_with_ttl(&mut c, "make_interval(days => 2000000000)").unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
    let e = begin_with_ttl(&mut c, "make_interval(hours => 2000000000)").unwrap_err();
    assert_eq!(sqlstate(&e), "22023");
}

#[test]
fn refused_calls_write_nothing() {
    let mut c = connect();
    let scope = scope("refused");
    for ttl in ["'0'", "'-1 day'", "'400 days'"] {
        let e = c
            .query_one(
                &format!("SELECT outcome FROM idem_begin($1, 'k', ttl => {ttl})"),
                &[&scope],
            )
            .unwrap_err();
        assert_eq!(sqlstate(&e), "22023");
    }
    let n: i64 = c
        .query_one("SELECT count(*) FROM idem_lookup($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}
