//! idem_proxy_configure refuses what PL/Proxy cannot route, with a clear error, and
//! changes nothing.

use pg_idempotency_tests::sharded::{partition_conninfo, Sharded};
use pg_idempotency_tests::*;

fn partitions_option_count(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT count(*) FROM pg_foreign_server s, unnest(s.srvoptions) o \
         WHERE s.srvname = 'pg_idempotency' AND o ~ '^p[0-9]+='",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn a_partition_count_that_is_not_a_power_of_two_is_refused() {
    let Some(s) = Sharded::new("cfg", 2) else {
        return;
    };
    let mut c = s.connect();
    let one = partition_conninfo(&s.partitions[0]);
    for bad in [vec![], vec![one.clone(); 3], vec![one.clone(), " ".into()]] {
        let e = c
            .query("SELECT * FROM idem_proxy_configure($1)", &[&bad])
            .unwrap_err();
        assert_eq!(sqlstate(&e), "22023", "{bad:?}: {e}");
        let db = e.as_db_error().unwrap();
        assert!(db.hint().is_some() && db.detail().is_some(), "{db:?}");
        assert_eq!(
            partitions_option_count(&mut c),
            2,
            "a refusal changed the server"
        );
    }
    // The layer still routes as before.
    let scope = scope("cfg");
    assert_eq!(begin(&mut c, &scope, "k").outcome, "claimed");
}

#[test]
fn configure_is_a_superusers() {
    let Some(s) = Sharded::new("cfgpriv", 1) else {
        return;
    };
    let name = format!("shard_cfg_{}", std::process::id());
    s.connect()
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN IN ROLE idempotency_admin"
        ))
        .unwrap();
    let mut c = s.connect_as(&name);
    let e = c
        .query("SELECT * FROM idem_proxy_configure(ARRAY['dbname=x'])", &[])
        .unwrap_err();
    assert_eq!(sqlstate(&e), "42501");
    drop(c);
    drop(s);
    connect_to(&with_db(&dsn(), "postgres"))
        .batch_execute(&format!("DROP ROLE IF EXISTS {name}"))
        .unwrap();
}

#[test]
fn the_layer_run_outside_a_transaction_refuses_and_leaves_nothing() {
    if !pg_idempotency_tests::sharded::plproxy_available() {
        return;
    }
    let db = format!("pgidem_layer_autocommit_{}", std::process::id());
    let target = fresh_database(&db);
    // psql -f without --single-transaction: each statement commits by itself.
    let file = root().join("sql/proxy/pg_idempotency_proxy.sql");
    let args = ["-q", "-v", "ON_ERROR_STOP=1", "-f", &file.to_string_lossy()].map(String::from);
    let (ok, out) = run_psql(&target, &args, &[]);
    assert!(!ok, "the layer installed outside a transaction:\n{out}");
    assert!(
        out.contains("25P01") || out.contains("installs in one transaction"),
        "{out}"
    );
    let left: (bool, bool) = connect_to(&target)
        .query_one(
            "SELECT to_regnamespace('idempotency') IS NOT NULL, \
                    EXISTS (SELECT FROM pg_extension WHERE extname = 'plproxy')",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        left,
        (false, false),
        "a refused install left something behind"
    );
    drop_database(&db);
}
