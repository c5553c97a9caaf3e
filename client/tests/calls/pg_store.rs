//! `PgStore` alone: what only a store over PostgreSQL has (the caller's own transaction, a
//! database without the SQL API, a session the server ends). The behaviour every store
//! shares is in parity.rs.

use std::time::Duration;

use crate::common::*;
use pg_idempotency_client::*;

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

/// The API looked for where the store calls it (its schema), not on the search_path: a
/// schema without it fails fast, and a search_path without ours changes nothing.
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
    let elsewhere = PgStore::new(&client).schema("no_api_here").unwrap();
    let e = elsewhere.check_installed().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotInstalled);
    assert!(e.message.contains("\"no_api_here\""), "{e}");
    PgStore::new(&client).check_installed().await.unwrap();
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

/// A connection whose calls are made as `role` (`SET ROLE`: the owner of its records).
async fn session_as(role: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("SET ROLE \"{role}\""))
        .await
        .unwrap();
    client
}

/// The operator calls and roles: `forget` and `metrics` act on the connection's role's own
/// records; naming another owner's record needs idempotency_admin's privileges (refused
/// with NotPermitted otherwise, whether or not it exists).
#[tokio::test]
async fn forget_and_metrics_keep_to_the_roles_key_space() {
    let (admin, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let role = unique("pgidem_service");
    admin
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" NOLOGIN; GRANT idempotency_user TO \"{role}\""
        ))
        .await
        .unwrap();
    let admin_name: String = admin
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    let service = session_as(&role).await;
    let (svc, ops) = (PgStore::new(&service), PgStore::new(&admin));
    let sc = unique("owned");
    claimed(svc.begin(&sc, "k", &opts()).await.unwrap());
    claimed(ops.begin(&sc, "mine", &opts()).await.unwrap());

    // The service sees its own row only; the admin, every owner's.
    let rows = svc.metrics().await.unwrap();
    assert!(rows
        .iter()
        .all(|r| r.owner.as_deref() == Some(role.as_str())));
    assert_eq!(rows.iter().filter(|r| r.scope == sc).count(), 1);
    let rows = ops.metrics().await.unwrap();
    let owners: Vec<_> = rows
        .iter()
        .filter(|r| r.scope == sc)
        .map(|r| r.owner.clone())
        .collect();
    assert_eq!(owners.len(), 2, "{owners:?}");
    assert!(owners.contains(&Some(role.clone())) && owners.contains(&Some(admin_name.clone())));

    // Not the service's to forget: another owner's key, existing or not.
    for key in ["mine", "absent"] {
        let e = svc
            .forget_owned_by(&sc, key, &admin_name)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotPermitted, "{key}: {e:?}");
    }
    assert!(ops.lookup(&sc, "mine").await.unwrap().is_some());
    // The admin's own key space has no "k"; the service's has.
    assert!(!ops.forget(&sc, "k").await.unwrap());
    assert!(svc.lookup(&sc, "k").await.unwrap().is_some());
    assert!(ops.forget_owned_by(&sc, "k", &role).await.unwrap());
    assert!(svc.lookup(&sc, "k").await.unwrap().is_none());
    assert!(svc.forget(&sc, "k").await.map(|gone| !gone).unwrap());
    // A role that does not exist is an error, not the caller's own record.
    assert!(ops
        .forget_owned_by(&sc, "mine", "no such role")
        .await
        .is_err());
    assert!(ops.forget(&sc, "mine").await.unwrap());

    drop(service);
    admin
        .batch_execute(&format!("DROP ROLE \"{role}\""))
        .await
        .unwrap();
}
