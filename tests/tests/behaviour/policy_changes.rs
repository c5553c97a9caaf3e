//! A changed policy applies to every session's next call, whatever that session read
//! before (the extension keeps a per-backend copy of the policies; the portable variant
//! reads them each time), and a reinstall in a running session is picked up.

use pg_idempotency_tests::*;

fn ttl_of(c: &mut Client, scope: &str, key: &str) -> String {
    begin(c, scope, key);
    c.query_one("SELECT ttl::text FROM idem_lookup($1, $2)", &[&scope, &key])
        .unwrap()
        .get(0)
}

#[test]
fn another_sessions_policy_change_applies_to_the_next_call() {
    let scope = scope("policy-change");
    let mut a = connect();
    let mut b = connect();
    assert_eq!(ttl_of(&mut a, &scope, "k1"), "01:00:00");

    b.execute("SELECT idem_set_policy($1, ttl => '2 hours')", &[&scope])
        .unwrap();
    assert_eq!(ttl_of(&mut a, &scope, "k2"), "02:00:00");

    b.execute("SELECT idem_set_policy($1, ttl => '3 hours')", &[&scope])
        .unwrap();
    assert_eq!(ttl_of(&mut a, &scope, "k3"), "03:00:00");

    b.execute("SELECT idem_drop_policy($1)", &[&scope]).unwrap();
    assert_eq!(ttl_of(&mut a, &scope, "k4"), "01:00:00");
}

#[test]
fn a_policy_set_in_a_transaction_applies_inside_it_and_not_after_a_rollback() {
    let scope = scope("policy-rollback");
    let mut a = connect();
    assert_eq!(ttl_of(&mut a, &scope, "k1"), "01:00:00");
    a.batch_execute("BEGIN").unwrap();
    a.execute("SELECT idem_set_policy($1, ttl => '2 hours')", &[&scope])
        .unwrap();
    assert_eq!(ttl_of(&mut a, &scope, "k2"), "02:00:00");
    a.batch_execute("ROLLBACK").unwrap();
    assert_eq!(ttl_of(&mut a, &scope, "k3"), "01:00:00");
    // Another session never saw it.
    let mut b = connect();
    assert_eq!(ttl_of(&mut b, &scope, "k4"), "01:00:00");
}

#[test]
fn a_session_keeps_working_across_a_reinstall() {
    let db = "pgidem_reinstall";
    ensure_database(db);
    let dsn = with_db(&dsn(), db);
    reinstall(&dsn);
    let mut c = connect_to(&dsn);
    c.execute("SELECT idem_set_policy('re', ttl => '2 hours')", &[])
        .unwrap();
    assert_eq!(ttl_of(&mut c, "re", "before"), "02:00:00");
    drop(c);
    reinstall(&dsn);
    // The same backend would be best, but reinstall runs the portable script through psql;
    // so: one session that calls, reinstalls the extension itself where it can, and calls
    // again.
    let mut c = connect_to(&dsn);
    assert_eq!(ttl_of(&mut c, "re", "after"), "01:00:00");
    if backend() == Backend::Extension {
        c.batch_execute("DROP EXTENSION pg_idempotency; CREATE EXTENSION pg_idempotency")
            .unwrap();
        c.execute("SELECT idem_set_policy('re', ttl => '3 hours')", &[])
            .unwrap();
        assert_eq!(ttl_of(&mut c, "re", "again"), "03:00:00");
        assert_eq!(
            begin(&mut c, "re", "again").outcome,
            "in_progress",
            "the new table is the one read"
        );
    }
}
