//! Where `PgStore` finds the SQL API: only in its schema (`public`, or the one it is
//! given), whatever the session's `search_path` says. Each test has a database of its own
//! on `PGIDEM_DSN`'s server, with the backend `PGIDEM_BACKEND` names.
//!
//! - an attacker who may create in a schema listed first on the client's `search_path`
//!   plants functions named like ours (the same argument types, and `varchar` ones): none
//!   of them runs (a canary only they write stays empty), and the calls reach our API;
//! - the API installed in a schema of another name (with a space and capitals, so the name
//!   must be quoted): `PgStore::new(..).schema(..)` works there, and the default store says
//!   the API is not installed instead of calling something else.

use std::sync::Arc;

use pg_idempotency_client::*;
use pg_idempotency_tests::attack::{Canary, Db, TestRole};
use pg_idempotency_tests::{backend, connect_to, drop_database, fresh_database, Backend, Client};
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(config: tokio_postgres::Config) -> tokio_postgres::Client {
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

fn claimed(b: Begin) -> Claim {
    match b {
        Begin::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// The columns `idem_begin` answers, for a planted function to look like it.
const BEGIN_COLUMNS: &str = "outcome text, fence bigint, attempt integer, recovered boolean, \
    upstream_key uuid, succeeded boolean, response jsonb, lease_until timestamptz, \
    expires_at timestamptz, retry_after interval, key text";

const LOOKUP_COLUMNS: &str = "scope text, key text, state text, fence bigint, attempt integer, \
    fingerprint bytea, upstream_key uuid, response jsonb, created_at timestamptz, \
    completed_at timestamptz, lease_until timestamptz, expires_at timestamptz, ttl interval, \
    owner regrole";

/// Schema `trap`, owned by `attacker` and usable by everyone, with functions named like
/// the API's: the same signatures (an unqualified call resolves to the first schema on the
/// path that has one) and `varchar` overloads. Each writes the canary, then answers like
/// the real one so that a captured call goes unnoticed (a failing one would roll the canary
/// row back with it).
fn plant(admin: &mut Client, attacker: &TestRole, canary: &Canary) {
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA trap AUTHORIZATION {0}; GRANT USAGE ON SCHEMA trap TO PUBLIC",
            attacker.ident()
        ))
        .unwrap();
    let mut c = attacker.login();
    let plant = |c: &mut Client, name: &str, args: &str, returns: &str, body: &str| {
        let signature = format!("trap.{name}({args})");
        // EXECUTE is PUBLIC's by default: anyone's call can land here.
        c.batch_execute(&format!(
            "CREATE FUNCTION {signature} RETURNS {returns} LANGUAGE plpgsql AS \
             $h$ BEGIN {}; {body} END $h$",
            canary.hit(&format!("trap.{name}"))
        ))
        .unwrap_or_else(|e| panic!("planting {signature}: {e:?}"));
    };
    let fake_claim = "RETURN QUERY SELECT 'claimed'::text, 1::bigint, 1, false, \
        gen_random_uuid(), NULL::boolean, NULL::jsonb, now() + interval '1 minute', \
        now() + interval '1 day', NULL::interval, NULL::text;";
    for t in ["text", "varchar"] {
        plant(
            &mut c,
            "idem_begin",
            &format!(
                "{t}, {t}, jsonb DEFAULT NULL, interval DEFAULT NULL, interval DEFAULT NULL, \
                 {t} DEFAULT NULL, {t} DEFAULT NULL, interval DEFAULT '0', uuid DEFAULT NULL"
            ),
            &format!("TABLE ({BEGIN_COLUMNS})"),
            fake_claim,
        );
        plant(
            &mut c,
            "idem_complete",
            &format!("{t}, {t}, bigint, jsonb, boolean DEFAULT true, boolean DEFAULT NULL"),
            "TABLE (state text, expires_at timestamptz)",
            "RETURN QUERY SELECT 'succeeded'::text, now();",
        );
        plant(
            &mut c,
            "idem_lookup",
            &format!("{t}, {t}, regrole DEFAULT NULL"),
            &format!("TABLE ({LOOKUP_COLUMNS})"),
            "RETURN;",
        );
        plant(
            &mut c,
            "idem_release",
            &format!("{t}, {t}, bigint"),
            "void",
            "RETURN;",
        );
    }
}

/// PgStore's calls from a session whose search_path puts the attacker's schema first: none
/// of the planted functions runs, and the record is our API's.
#[test]
fn a_hostile_schema_first_on_the_search_path_does_not_capture_pg_store() {
    let db = Db::fresh("client_search_path");
    let mut admin = db.connect();
    let canary = Canary::create(&mut admin, "client_path_canary");
    let attacker = TestRole::create(&db.dsn, "client_path_attacker", "");
    let victim = TestRole::create(&db.dsn, "client_path_app", "IN ROLE idempotency_user");
    plant(&mut admin, &attacker, &canary);

    let mut config: tokio_postgres::Config = db.dsn.parse().unwrap();
    config.user(&victim.name);
    let scope = pg_idempotency_tests::scope("path");
    let scope_run = scope.clone();
    // The calls' answers are checked after the canary: a captured call answers what the
    // attacker wants, and the canary says why.
    let (record, replay) = runtime().block_on(async move {
        let client = connect(config).await;
        client
            .batch_execute("SET search_path = trap, public")
            .await
            .unwrap();
        let store = PgStore::new(Arc::new(client));
        store.check_installed().await.unwrap();
        let options = BeginOptions::default();
        let claim = claimed(store.begin(&scope_run, "k1", &options).await.unwrap());
        let response = json!({"ok": 1});
        store
            .complete(&scope_run, "k1", claim.fence, Some(&response), true, None)
            .await
            .unwrap();
        let record = store.lookup(&scope_run, "k1").await.unwrap();
        let second = claimed(store.begin(&scope_run, "k2", &options).await.unwrap());
        store.release(&scope_run, "k2", second.fence).await.unwrap();
        let replay = store.begin(&scope_run, "k1", &options).await.unwrap();
        (record, replay)
    });
    canary.assert_empty(&mut admin);
    let record = record.expect("the record");
    assert_eq!(record.state, State::Succeeded);
    assert_eq!(record.response, Some(json!({"ok": 1})));
    match replay {
        Begin::Replay(r) => assert_eq!(r.response, Some(json!({"ok": 1}))),
        other => panic!("expected the replay, got {other:?}"),
    }
    // The record is our API's (k2 was released: nothing is left of it), owned by the
    // app's role.
    let ours: Vec<String> = db
        .records()
        .into_iter()
        .filter(|r| r.contains(&scope))
        .collect();
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert!(
        ours[0].contains(",k1,succeeded,") && ours[0].contains(&victim.name),
        "{ours:?}"
    );
}

/// Installs the backend under test into `schema` (which the install needs to exist) in
/// the empty database of `dsn`.
fn install_into(dsn: &str, schema: &str) {
    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
    let mut c = connect_to(dsn);
    c.batch_execute(&format!("CREATE SCHEMA {quoted}")).unwrap();
    match backend() {
        Backend::Extension => c
            .batch_execute(&format!("CREATE EXTENSION pg_idempotency SCHEMA {quoted}"))
            .unwrap_or_else(|e| panic!("CREATE EXTENSION ... SCHEMA {quoted}: {e}")),
        Backend::Portable => {
            let (ok, out) = pg_idempotency_tests::run_sql_file(
                dsn,
                "pg_idempotency.sql",
                &[("schema", schema)],
                &[],
            );
            assert!(ok, "portable install into {quoted} failed:\n{out}");
        }
    }
}

/// The API in a schema named `App Api`: a store told so makes every call there (one by one
/// and in batches, the operator's calls too); a store that is not told finds nothing in
/// `public` and says so, whatever the search_path holds.
#[test]
fn pg_store_calls_the_api_in_the_schema_it_is_given() {
    const SCHEMA: &str = "App Api";
    let name = format!(
        "pidem_client_schema_{}",
        match backend() {
            Backend::Extension => "ext",
            Backend::Portable => "por",
        }
    );
    let dsn = fresh_database(&name);
    install_into(&dsn, SCHEMA);
    let config: tokio_postgres::Config = dsn.parse().unwrap();
    let own_config = config.clone();
    runtime().block_on(async move {
        let client = Arc::new(connect(config).await);
        // The schema on the path would make an unqualified call work: the default store
        // must still look in public only.
        client
            .batch_execute("SET search_path = \"App Api\", public")
            .await
            .unwrap();
        let public = PgStore::new(client.clone());
        assert_eq!(
            public.check_installed().await.unwrap_err().kind,
            ErrorKind::NotInstalled
        );
        assert!(public
            .begin("s", "k", &BeginOptions::default())
            .await
            .is_err());

        let store = PgStore::new(client.clone()).schema(SCHEMA).unwrap();
        assert_eq!(store.api_schema().map(ApiSchema::name), Some(SCHEMA));
        store.check_installed().await.unwrap();
        let claim = claimed(
            store
                .begin("s", "k", &BeginOptions::default())
                .await
                .unwrap(),
        );
        store
            .extend(
                "s",
                "k",
                claim.fence,
                Some(std::time::Duration::from_secs(60)),
            )
            .await
            .unwrap();
        store
            .complete("s", "k", claim.fence, Some(&json!({"n": 1})), true, None)
            .await
            .unwrap();
        assert!(matches!(
            store
                .begin("s", "k", &BeginOptions::default())
                .await
                .unwrap(),
            Begin::Replay(_)
        ));
        assert_eq!(
            store.lookup("s", "k").await.unwrap().map(|r| r.state),
            Some(State::Succeeded)
        );
        let items = [BatchBegin::new("b1"), BatchBegin::new("b2")];
        let begun = store
            .begin_batch("s", &items, &BatchOptions::default())
            .await
            .unwrap();
        let completions: Vec<BatchComplete> = begun
            .iter()
            .zip(["b1", "b2"])
            .map(|(b, key)| match b {
                Ok(Begin::Claimed(c)) => BatchComplete::succeeded(key, c.fence, json!({})),
                other => panic!("expected a claim, got {other:?}"),
            })
            .collect();
        store.complete_batch("s", &completions).await.unwrap();
        assert!(!store.metrics().await.unwrap().is_empty());
        assert!(store.forget("s", "k").await.unwrap());
        store.purge().await.unwrap();
        // And the exactly-once registry's store over a transaction, in the same schema.
        let tools = ExactlyOnce::new().in_schema(ApiSchema::new(SCHEMA).unwrap());
        tools
            .register(
                TxToolSpec::new(
                    "noop",
                    tx_tool_fn(|_tx, input| Box::pin(async move { Ok(input) })),
                )
                .idempotent(Idempotent::new()),
            )
            .unwrap();
        let mut own = connect(own_config).await;
        own.batch_execute("SET search_path = public").await.unwrap();
        let tx = own.transaction().await.unwrap();
        tools
            .dispatch_in(&tx, "noop", json!({"a": 1}))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            store
                .metrics()
                .await
                .unwrap()
                .iter()
                .filter(|m| m.scope == "noop")
                .count(),
            1
        );
    });
    drop_database(&name);
}
