//! `pg_idempotency.purge_batch_size` (0.4.0): the batch of the purge worker and of
//! `idem_purge_expired()` when it gives none, on both backends.

use pg_idempotency_tests::*;

fn rows_of(c: &mut Client, scope: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM idempotency.records WHERE scope = $1",
        &[&scope],
    )
    .unwrap()
    .get(0)
}

#[test]
fn a_purge_without_batch_size_walks_the_setting_s_batches_to_the_end() {
    // Its expired records must stay until its own purge.
    let _alone = crate::purges_alone();
    let mut c = connect();
    let sc = scope("purge-batch");
    let keys: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
    c.execute(
        "SELECT count(idem_begin($1, k, ttl => '10 ms', lease => '10 ms', unresolved_ttl => '10 ms')) FROM unnest($2::text[]) k",
        &[&sc, &keys],
    )
    .unwrap();
    wait_for_expiry(&mut c, &sc, &keys);
    assert_eq!(rows_of(&mut c, &sc), 5, "expired rows stay until purged");
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL pg_idempotency.purge_batch_size = 2")
        .unwrap();
    let purged: i64 = tx
        .query_one("SELECT idem_purge_expired()", &[])
        .unwrap()
        .get(0);
    tx.commit().unwrap();
    assert!(purged >= 5, "purged {purged}");
    assert_eq!(rows_of(&mut c, &sc), 0, "batches of 2 went on to the end");
}

#[test]
fn a_batch_size_below_one_is_refused_from_the_setting_and_the_argument() {
    let mut c = connect();
    let mut tx = c.transaction().unwrap();
    // The extension refuses the SET itself; the PL/pgSQL variant, reading a custom setting,
    // refuses it where the purge reads it. Either way: 22023, and nothing is purged.
    let err = tx
        .batch_execute(
            "SET LOCAL pg_idempotency.purge_batch_size = 0; SELECT idem_purge_expired();",
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023", "{err}");
    tx.rollback().unwrap();
    let err = c
        .query_one("SELECT idem_purge_expired(0)", &[])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023", "{err}");
    let db = err.as_db_error().unwrap();
    assert!(db
        .hint()
        .unwrap()
        .contains("pg_idempotency.purge_batch_size"));
}

#[test]
fn the_setting_defaults_to_the_protocol_s_batch() {
    let mut c = connect();
    if backend() == Backend::Portable {
        skip(
            Skip::NotApplicable,
            "the PL/pgSQL variant has no registered settings: an unset custom setting has no value to show",
        );
        return;
    }
    let shown: String = c
        .query_one("SHOW pg_idempotency.purge_batch_size", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        shown,
        pg_idempotency_protocol::settings::PURGE_BATCH_SIZE
            .default
            .to_string()
    );
}
