//! The example service (server/examples/charges/) answers as its documentation says: a
//! real server on 127.0.0.1 over the database under test (`PGIDEM_DSN`, either backend),
//! the example's tables in a schema of each test's own.

#[path = "../../examples/charges/app.rs"]
mod app;

use std::future::Future;

use pg_idempotency_tests::dsn;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_postgres::NoTls;

/// A schema of the test's own in the database under test, where the example's tables
/// go (its connections put it first on their search_path, before the SQL API's schema),
/// dropped when the test ends, pass or fail.
struct Schema {
    name: String,
}

impl Schema {
    fn new(test: &str) -> Schema {
        let name = pg_idempotency_tests::scope(test).replace('-', "_");
        pg_idempotency_tests::connect()
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .unwrap_or_else(|e| panic!("CREATE SCHEMA {name}: {e}"));
        Schema { name }
    }

    fn config(&self) -> tokio_postgres::Config {
        let mut config: tokio_postgres::Config = dsn().parse().expect("PGIDEM_DSN");
        let path = config.get_options().map(str::to_string).unwrap_or_default();
        config.options(format!("{path} -c search_path={},public", self.name).trim());
        config
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let drop = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
        let _ = std::panic::catch_unwind(|| pg_idempotency_tests::connect().batch_execute(&drop));
    }
}

/// The example service on 127.0.0.1 and a connection to its database, for one test.
struct Service {
    base: String,
    http: reqwest::Client,
    db: tokio_postgres::Client,
}

/// Runs `test` against the example service over a fresh database of its own.
fn with_service<F, Fut>(name: &str, test: F)
where
    F: FnOnce(Service) -> Fut,
    Fut: Future<Output = ()>,
{
    if pg_idempotency_tests::skip_through_pooler(
        "the example's tables are found through the connection's search_path, a startup \
         option (options=-c search_path=...) that PgBouncer does not pass on",
    ) {
        return;
    }
    let schema = Schema::new(name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let config = schema.config();
        let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
            config.clone(),
            NoTls,
        ))
        .max_size(16)
        .build()
        .expect("a pool");
        app::create_tables(&pool)
            .await
            .expect("the example's tables");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app::router(pool)).await });
        let (db, connection) = config.connect(NoTls).await.expect("a connection");
        tokio::spawn(connection);
        test(Service {
            base,
            http: reqwest::Client::new(),
            db,
        })
        .await;
    });
    // The runtime ends the server and closes the pool's connections before the drop.
    drop(runtime);
    drop(schema);
}

/// Who calls.
#[derive(Clone, Copy)]
enum Caller<'a> {
    Bearer(&'a str),
    ApiKey(&'a str),
    Nobody,
}

/// One answer, read whole.
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: bytes::Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }
}

impl Service {
    async fn post(&self, path: &str, key: Option<&str>, caller: Caller<'_>, body: Value) -> Reply {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        request = match caller {
            Caller::Bearer(token) => request.bearer_auth(token),
            Caller::ApiKey(key) => request.header("x-api-key", key),
            Caller::Nobody => request,
        };
        let response = request.send().await.expect("the service answers");
        Reply {
            status: response.status(),
            headers: response.headers().clone(),
            body: response.bytes().await.expect("a body"),
        }
    }

    async fn count(&self, table: &str, principal: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table} WHERE principal = $1");
        self.db.query_one(&sql, &[&principal]).await.unwrap().get(0)
    }
}

/// A caller no other test or earlier run uses (tests share the database's records).
fn unique(name: &str) -> String {
    pg_idempotency_tests::scope(name)
}

#[test]
fn a_retried_charge_gives_one_charge_row() {
    if pg_idempotency_tests::skip_through_proxy("the charge and its record in one transaction") {
        return;
    }
    with_service("example_retried", |s| async move {
        let ann = unique("tok-ann");
        let body = json!({"amount": 500, "currency": "eur"});
        let caller = Caller::Bearer(&ann);
        let first = s
            .post("/charges", Some("charge-1"), caller, body.clone())
            .await;
        assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
        assert!(!first.replayed());
        let id = first.json()["id"].as_i64().expect("the charge's id");
        assert_eq!(
            first.header("location"),
            Some(format!("/charges/{id}").as_str())
        );

        for _ in 0..2 {
            let retry = s
                .post("/charges", Some("charge-1"), caller, body.clone())
                .await;
            assert_eq!(retry.status, StatusCode::CREATED);
            assert!(retry.replayed(), "{retry:?}");
            assert_eq!(retry.body, first.body);
            assert_eq!(retry.header("location"), first.header("location"));
            assert_eq!(retry.header("content-type"), Some("application/json"));
        }
        assert_eq!(s.count("charges", &ann).await, 1);

        // The record was completed by the charge's own transaction: its last write and the
        // charge row carry the same transaction id.
        let charge_xid: String =
            s.db.query_one("SELECT xmin::text FROM charges WHERE id = $1", &[&id])
                .await
                .unwrap()
                .get(0);
        let scope = pg_idempotency_server::Scope::new(&ann, "/charges").store_scope(128);
        let record =
            s.db.query_one(
                "SELECT xmin::text, state::text FROM idempotency.records \
                 WHERE scope = $1 AND key = 'charge-1'",
                &[&scope],
            )
            .await
            .unwrap();
        assert_eq!(record.get::<_, String>(1), "succeeded");
        assert_eq!(record.get::<_, String>(0), charge_xid);
    });
}

#[test]
fn concurrent_duplicates_of_a_charge_give_one_charge_row() {
    with_service("example_concurrent", |s| async move {
        let bob = unique("key-bob");
        let s = std::sync::Arc::new(s);
        let body = json!({"amount": 900});
        let mut calls = Vec::new();
        for _ in 0..8 {
            let (s, body, bob) = (s.clone(), body.clone(), bob.clone());
            calls.push(tokio::spawn(async move {
                s.post("/charges", Some("charge-2"), Caller::ApiKey(&bob), body)
                    .await
            }));
        }
        let mut created = Vec::new();
        for call in calls {
            let reply = call.await.unwrap();
            match reply.status {
                StatusCode::CREATED => created.push(reply.body),
                // A duplicate that waited longer than the layer's wait is told to retry.
                StatusCode::CONFLICT => assert!(reply.header("retry-after").is_some()),
                other => panic!("{other}: {reply:?}"),
            }
        }
        assert!(!created.is_empty());
        assert!(created.iter().all(|b| *b == created[0]), "{created:?}");
        let last = s
            .post("/charges", Some("charge-2"), Caller::ApiKey(&bob), body)
            .await;
        assert!(last.replayed());
        assert_eq!(last.body, created[0]);
        assert_eq!(s.count("charges", &bob).await, 1);
    });
}

#[test]
fn keys_belong_to_their_caller_and_route() {
    with_service("example_scopes", |s| async move {
        let (ann, bob) = (unique("tok-ann"), unique("key-bob"));
        let body = json!({"amount": 100});
        let ann_charge = s
            .post("/charges", Some("k"), Caller::Bearer(&ann), body.clone())
            .await;
        let bob_charge = s
            .post("/charges", Some("k"), Caller::ApiKey(&bob), body.clone())
            .await;
        assert_eq!(ann_charge.status, StatusCode::CREATED);
        assert_eq!(bob_charge.status, StatusCode::CREATED);
        assert!(
            !bob_charge.replayed(),
            "another caller's key is not a replay"
        );
        assert_ne!(ann_charge.json()["id"], bob_charge.json()["id"]);
        assert_eq!(s.count("charges", &ann).await, 1);
        assert_eq!(s.count("charges", &bob).await, 1);

        // The same key on the other route is another operation.
        let email = s
            .post(
                "/emails",
                Some("k"),
                Caller::Bearer(&ann),
                json!({"to": "ann@example.com"}),
            )
            .await;
        assert_eq!(email.status, StatusCode::ACCEPTED, "{email:?}");
        assert!(!email.replayed());
        assert_eq!(s.count("emails", &ann).await, 1);
    });
}

#[test]
fn a_refused_charge_is_released_and_a_refused_email_is_replayed() {
    with_service("example_refusals", |s| async move {
        let ann = unique("tok-ann");
        let caller = Caller::Bearer(&ann);
        // /charges releases its 4xx: the caller fixes the body and retries with the key.
        let refused = s
            .post("/charges", Some("c"), caller, json!({"amount": 0}))
            .await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
        let fixed = s
            .post("/charges", Some("c"), caller, json!({"amount": 250}))
            .await;
        assert_eq!(fixed.status, StatusCode::CREATED, "{fixed:?}");
        assert!(!fixed.replayed());
        assert_eq!(s.count("charges", &ann).await, 1);

        // /emails caches its 4xx: the same request gets the same refusal, replayed.
        let bad = json!({"to": "not an address"});
        let first = s.post("/emails", Some("e"), caller, bad.clone()).await;
        assert_eq!(first.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(!first.replayed());
        let again = s.post("/emails", Some("e"), caller, bad).await;
        assert_eq!(again.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(again.replayed(), "{again:?}");
        assert_eq!(again.body, first.body);
        assert_eq!(s.count("emails", &ann).await, 0);

        // A good email, retried: one sent.
        let good = json!({"to": "ann@example.com"});
        let sent = s.post("/emails", Some("e2"), caller, good.clone()).await;
        let resent = s.post("/emails", Some("e2"), caller, good).await;
        assert_eq!(sent.status, StatusCode::ACCEPTED);
        assert!(resent.replayed());
        assert_eq!(resent.body, sent.body);
        assert_eq!(s.count("emails", &ann).await, 1);
    });
}

#[test]
fn requests_the_layer_cannot_key_are_refused() {
    with_service("example_refused", |s| async move {
        let ann = unique("tok-ann");
        let body = json!({"amount": 100});
        let missing = s
            .post("/charges", None, Caller::Bearer(&ann), body.clone())
            .await;
        assert_eq!(missing.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            missing.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(
            missing.json()["type"],
            "https://pg-idempotency.dev/problems/missing-idempotency-key"
        );

        let anonymous = s
            .post("/charges", Some("k"), Caller::Nobody, body.clone())
            .await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);

        let first = s
            .post("/charges", Some("k"), Caller::Bearer(&ann), body)
            .await;
        assert_eq!(first.status, StatusCode::CREATED);
        let changed = s
            .post(
                "/charges",
                Some("k"),
                Caller::Bearer(&ann),
                json!({"amount": 101}),
            )
            .await;
        assert_eq!(changed.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            changed.json()["type"],
            "https://pg-idempotency.dev/problems/idempotency-key-mismatch"
        );
        assert_eq!(s.count("charges", &ann).await, 1);
        assert_eq!(s.count("charges", "").await, 0);
    });
}
