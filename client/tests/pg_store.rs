//! `PgStore` alone: what only a store over PostgreSQL has (the caller's own transaction, a
//! database without the SQL API, a session the server ends). The behaviour every store
//! shares is in parity.rs.

use std::time::Duration;

mod common;

use common::*;
use idempotency::*;

fn claimed(b: Begin) -> Claim {
    match b {
        Begin::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn opts() -> BeginOptions {
    BeginOptions::default()
}

/// A claim in the caller's own transaction: rolled back, it vanishes.
#[tokio::test]
async fn a_claim_in_a_rolled_back_transaction_vanishes() {
    let (mut client, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let sc = unique("tx");
    {
        let tx = client.transaction().await.unwrap();
        let store = PgStore::new(&tx);
        claimed(store.begin(&sc, "k", &opts()).await.unwrap());
        tx.rollback().await.unwrap();
    }
    let store = PgStore::new(&client);
    assert!(store.lookup(&sc, "k").await.unwrap().is_none());
}

#[tokio::test]
async fn without_the_extension_it_fails_fast() {
    let (client, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("SET search_path = pg_catalog")
        .await
        .unwrap();
    let e = PgStore::new(&client).check_installed().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotInstalled);
}

/// A session ended by the server mid-call (FATAL, here `pg_terminate_backend` of a begin
/// waiting on a held key) is an unknown outcome to the caller: the call may have committed
/// before the session ended, so the caller repeats it to learn (with its claim token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_mid_call_is_an_unknown_outcome() {
    let (holder, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let (waiter, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let pid: i32 = waiter
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sc = unique("fatal");
    claimed(
        PgStore::new(&holder)
            .begin(&sc, "k", &opts())
            .await
            .unwrap(),
    );
    let wait = BeginOptions {
        wait: Duration::from_secs(60),
        claim_token: Some(uuid::Uuid::new_v4()),
        ..opts()
    };
    let call = tokio::spawn(async move { PgStore::new(&waiter).begin(&sc, "k", &wait).await });
    // Ended once it is seen waiting inside idem_begin.
    let mut seen = false;
    for _ in 0..500 {
        let n: i64 = holder
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' \
                 AND query LIKE '%idem_begin%'",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "the waiting begin was never seen");
    holder
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let err = call.await.unwrap().expect_err("the session was ended");
    assert!(err.outcome_unknown(), "{err:?}");
}
