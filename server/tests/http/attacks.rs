//! The attacker's side of the layer: whoever repeats a key gets the first answer, so a
//! replay must carry nothing that was the first caller's alone (a session cookie, a header
//! the operator marks private), and no answer may show the database's own words (its
//! messages name functions, settings, limits and SQLSTATEs: the operator's, in the log).

use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{AppendHeaders, IntoResponse};
use axum::routing::post;
use axum::Router;
use pg_idempotency_client::{IdempotencyStore, PgStore};
use pg_idempotency_server::Rule;
use pg_idempotency_tests::attack::{Db, TestRole};

use crate::common::*;

/// A sign-up that mints a session for its caller: a cookie, a token header, and a receipt
/// whose `Location` carries a per-caller signature. Every run mints new secrets.
fn sign_up(gate: Gate) -> Router {
    Router::new().route(
        "/signups",
        post(move || {
            let gate = gate.clone();
            async move {
                gate.pass().await;
                let n = gate.done();
                (
                    StatusCode::CREATED,
                    AppendHeaders([
                        (header::SET_COOKIE, format!("session=secret-{n}; HttpOnly")),
                        (header::SET_COOKIE, "theme=dark".to_string()),
                        (
                            header::HeaderName::from_static("x-session-token"),
                            format!("token-{n}"),
                        ),
                        (header::LOCATION, format!("/receipts/{n}?signature=sig-{n}")),
                        (header::CONTENT_TYPE, "application/json".to_string()),
                        (header::ETAG, format!("\"{n}\"")),
                    ]),
                    // A Body sets no Content-Type of its own (a String would add text/plain).
                    axum::body::Body::from(format!("{{\"account\": {n}}}")),
                )
                    .into_response()
            }
        }),
    )
}

/// The stored record's header names (lower case), as the store holds them.
async fn stored_header_names(
    store: &std::sync::Arc<dyn IdempotencyStore>,
    principal: &str,
    key: &str,
) -> Vec<String> {
    let record = store
        .lookup(&store_scope(principal, "/signups"), key)
        .await
        .unwrap()
        .expect("the answer is remembered");
    record.response.expect("a stored answer")["headers"]
        .as_array()
        .expect("a header list")
        .iter()
        .map(|pair| pair[0].as_str().unwrap().to_string())
        .collect()
}

/// The first caller gets its session cookie; whoever repeats the key gets the same account
/// back, and no cookie, no session token: the layer never stores them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_never_carries_set_cookie() {
    let store = store_on(pool());
    let gate = Gate::open();
    let idem = layer(store.clone()).rule("/signups", Rule::required());
    let base = serve(sign_up(gate.clone()).route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/signups");

    let first = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let cookies: Vec<&str> = first
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(cookies, ["session=secret-1; HttpOnly", "theme=dark"]);
    assert_eq!(header(&first, "x-session-token"), Some("token-1"));

    let replay = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&replay));
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert!(
        replay.headers().get(header::SET_COOKIE).is_none(),
        "a replay handed on the first caller's cookies: {:?}",
        replay.headers().get_all(header::SET_COOKIE)
    );
    assert_eq!(header(&replay, "x-session-token"), None, "a session token");
    // What describes the answer is still there.
    assert_eq!(header(&replay, "content-type"), Some("application/json"));
    assert_eq!(header(&replay, "etag"), Some("\"1\""));
    assert_eq!(
        header(&replay, "location"),
        Some("/receipts/1?signature=sig-1")
    );
    assert_eq!(replay.text().await.unwrap(), "{\"account\": 1}");
    assert_eq!(gate.runs(), 1);

    // Never stored, so no other version or process can replay them either.
    let names = stored_header_names(&store, &principal, &key).await;
    for secret in ["set-cookie", "x-session-token"] {
        assert!(
            !names.iter().any(|n| n == secret),
            "{secret} stored: {names:?}"
        );
    }
}

/// The operator marks `Location` private (it carries a per-caller signature): the first
/// caller gets it, a replay does not, and the record does not hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_marked_private_header_is_not_replayed() {
    let store = store_on(pool());
    let gate = Gate::open();
    let idem = layer(store.clone())
        .rule("/signups", Rule::required())
        .private_headers(["Location"]);
    let base = serve(sign_up(gate.clone()).route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/signups");

    let first = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&first, "location"),
        Some("/receipts/1?signature=sig-1")
    );
    let replay = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&replay));
    assert_eq!(
        header(&replay, "location"),
        None,
        "a header the operator marked private was replayed"
    );
    assert_eq!(header(&replay, "etag"), Some("\"1\""));
    assert_eq!(gate.runs(), 1);
    let names = stored_header_names(&store, &principal, &key).await;
    assert!(
        !names.iter().any(|n| n == "location"),
        "location stored: {names:?}"
    );
}

/// What a tenant must never see in an answer, beyond the database's own words.
const INTERNAL: [&str; 8] = [
    "idem_",
    "pg_idempotency",
    "SQLSTATE",
    "permission denied",
    "does not exist",
    "max_key_bytes",
    "public.",
    "ERROR",
];

async fn assert_tells_nothing_internal(
    response: reqwest::Response,
    status: u16,
    kind: &str,
    words: &[String],
) {
    assert_eq!(response.status().as_u16(), status, "{kind}");
    assert_eq!(
        header(&response, "content-type"),
        Some("application/problem+json")
    );
    let text = response.text().await.unwrap();
    let body: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        body["type"],
        format!("https://pg-idempotency.dev/problems/{kind}")
    );
    for member in ["title", "detail", "hint"] {
        assert!(
            body[member].as_str().is_some_and(|s| !s.is_empty()),
            "{kind}: no {member}: {text}"
        );
    }
    for word in words.iter().map(String::as_str).chain(INTERNAL) {
        assert!(
            !text.contains(word),
            "{kind}: the answer shows {word:?}: {text}"
        );
    }
}

/// Store errors, made by the real database of the test's own: a key longer than the
/// database takes (the layer configured to pass it on), the role's EXECUTE revoked, and the
/// API's function renamed away. Each answer is the layer's problem in its own words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_error_answer_carries_no_database_text() {
    if pg_idempotency_tests::skip_through_pooler(
        "the database's own words are read as a role taken with SET ROLE, a session setting",
    ) {
        return;
    }
    let own = tokio::task::spawn_blocking(|| {
        let db = Db::fresh("http_store_errors");
        let role = TestRole::create(&db.dsn, "http_app", "IN ROLE idempotency_user");
        OffRuntime(Some((role, db)))
    })
    .await
    .unwrap();
    let (role, db) = own.0.as_ref().unwrap();
    let mut config: tokio_postgres::Config = db.dsn.parse().unwrap();
    config.user(&role.name);
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(4)
        .build()
        .unwrap();
    let store: std::sync::Arc<dyn IdempotencyStore> =
        std::sync::Arc::new(PgStore::new(pool).statement_mode(statement_mode()));
    let gate = Gate::open();
    let idem = layer(store)
        .rule("/signups", Rule::required())
        .max_key_bytes(4096)
        .store_timeout(Duration::from_secs(10));
    let base = serve(sign_up(gate.clone()).route_layer(idem)).await;
    let http = http();
    let url = format!("{base}/signups");
    let principal = unique("p");

    // The set-up works: a call goes through as the role.
    let ok = keyed(&http, &url, &principal, "fine", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);

    // 1. A key the database refuses (22023, naming its setting and limit).
    let long_key = "k".repeat(600);
    let words = {
        let (db, role_name) = (db.dsn.clone(), role.ident());
        let sql = format!("SELECT public.idem_begin('s', '{long_key}')");
        tokio::task::spawn_blocking(move || {
            let db = DbRef(db);
            db.words(&sql, Some(&role_name))
        })
        .await
        .unwrap()
    };
    let refused = keyed(&http, &url, &principal, &long_key, "{}")
        .send()
        .await
        .unwrap();
    assert_tells_nothing_internal(refused, 400, "idempotency-key-refused", &words).await;

    // 2. EXECUTE revoked: the role no longer has idempotency_user (42501).
    let words = {
        let (dsn, role_ident) = (db.dsn.clone(), role.ident());
        tokio::task::spawn_blocking(move || {
            let db = DbRef(dsn);
            db.admin(&format!("REVOKE idempotency_user FROM {role_ident}"));
            db.words("SELECT public.idem_begin('s', 'k')", Some(&role_ident))
        })
        .await
        .unwrap()
    };
    let denied = keyed(&http, &url, &principal, "after-revoke", "{}")
        .send()
        .await
        .unwrap();
    assert_tells_nothing_internal(denied, 503, "idempotency-store-unavailable", &words).await;

    // 3. The function renamed away (42883: the call names a function that is not there).
    let words = {
        let (dsn, role_ident) = (db.dsn.clone(), role.ident());
        tokio::task::spawn_blocking(move || {
            let db = DbRef(dsn);
            db.admin(&format!(
                "GRANT idempotency_user TO {role_ident}; \
                 ALTER FUNCTION public.idem_begin(text, text, jsonb, interval, interval, text, \
                   text, interval, uuid, interval) RENAME TO idem_begin_gone"
            ));
            db.words("SELECT public.idem_begin('s', 'k')", Some(&role_ident))
        })
        .await
        .unwrap()
    };
    let gone = keyed(&http, &url, &principal, "after-rename", "{}")
        .send()
        .await
        .unwrap();
    assert_tells_nothing_internal(gone, 503, "idempotency-store-unavailable", &words).await;
    assert_eq!(gate.runs(), 1, "only the set-up's call ran");
}

/// Drops what it holds (the test's role and database, whose drops use the sync client) on
/// a thread of its own: the sync client may not run on the runtime's threads, and a test
/// that fails must still clean up rather than abort the whole binary.
struct OffRuntime<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Drop for OffRuntime<T> {
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            let _ = std::thread::spawn(move || drop(held)).join();
        }
    }
}

/// The test database by its DSN, for the blocking sections (the sync client may not run on
/// the runtime's threads). What the database says of a call, in its own words (message,
/// SQLSTATE, detail, hint): none of it may reach a tenant.
struct DbRef(String);

impl DbRef {
    fn admin(&self, sql: &str) {
        pg_idempotency_tests::connect_to(&self.0)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The database's own words for `sql` run as `role` (quoted): message, SQLSTATE,
    /// detail, hint.
    fn words(&self, sql: &str, role: Option<&str>) -> Vec<String> {
        let mut c = pg_idempotency_tests::connect_to(&self.0);
        if let Some(role) = role {
            c.batch_execute(&format!("SET ROLE {role}")).unwrap();
        }
        let e = c
            .batch_execute(sql)
            .expect_err("the database refuses the call");
        let db_error = e.as_db_error().expect("a database error");
        let mut words = vec![
            db_error.message().to_string(),
            db_error.code().code().to_string(),
        ];
        words.extend(db_error.detail().map(str::to_string));
        words.extend(db_error.hint().map(str::to_string));
        words
    }
}
