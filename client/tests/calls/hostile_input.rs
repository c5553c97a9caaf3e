//! Input the SQL API cannot hold, through the client's stores: NUL in a scope or key, and
//! U+0000 in a request or a response (jsonb has no U+0000). PgStore against the real server
//! (a database of its own on `PGIDEM_DSN`'s server, with the backend `PGIDEM_BACKEND`
//! names) and MemoryStore must answer alike: a typed error, no panic, nothing stored.
//!
//! Invalid UTF-8 cannot be passed: scope and key are `&str` and requests and responses are
//! `serde_json::Value`, whose strings are Rust strings. The one place bytes come in is a web
//! action's HTTP response: its body is decoded with U+FFFD for what is not UTF-8 (headers are
//! never cached), so that is the boundary tested here, with a body that is not UTF-8 and
//! a JSON body that carries U+0000.

use std::sync::Arc;

use crate::common::raw_http::read_request;
use pg_idempotency_client::*;
use pg_idempotency_tests::attack::Db;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Every record of the test's database, as text: the behaviour suite's sync client, inside
/// the runtime as a blocking section.
fn records(db: &Db) -> Vec<String> {
    tokio::task::block_in_place(|| db.records())
}

/// Runs `test` on a store: MemoryStore, or PgStore on a fresh database (the sync database
/// helpers stay outside the runtime). `records` says what PgStore's database holds.
fn run<F, Fut>(pg: bool, test_name: &str, test: F)
where
    F: FnOnce(&'static str, Arc<dyn IdempotencyStore>, Option<Arc<Db>>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if !pg {
        rt.block_on(test("MemoryStore", Arc::new(MemoryStore::new()), None));
        return;
    }
    let db = Arc::new(Db::fresh(&format!("client_{test_name}")));
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&db.dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        test(
            "PgStore",
            Arc::new(PgStore::new(Arc::new(client))),
            Some(db.clone()),
        )
        .await;
    });
}

/// One test per store for each case: `<case>_memory` and `<case>_pg`.
macro_rules! on_both_stores {
    ($case:ident, $memory:ident, $pg:ident) => {
        #[test]
        fn $memory() {
            run(false, stringify!($case), $case);
        }
        #[test]
        fn $pg() {
            run(true, stringify!($case), $case);
        }
    };
}

fn claimed(b: Begin) -> Claim {
    match b {
        Begin::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// A scope or key with a NUL is refused with an argument error (what the server says of
/// such text: it cannot be stored) and nothing is stored.
async fn nul_in_scope_or_key(
    store_name: &'static str,
    s: Arc<dyn IdempotencyStore>,
    db: Option<Arc<Db>>,
) {
    let before = db.as_deref().map(records);
    for (scope, key) in [("s\0", "k"), ("s", "k\0"), ("\0", "k"), ("s", "\0")] {
        let what = format!("{store_name}: begin({scope:?}, {key:?})");
        let e = s
            .begin(scope, key, &BeginOptions::default())
            .await
            .expect_err(&what);
        assert!(
            matches!(e.kind, ErrorKind::InvalidArgument | ErrorKind::Database),
            "{what}: {:?} {e}",
            e.kind
        );
        // Whatever lookup answers, it is not a record.
        let found = s.lookup(scope, key).await;
        assert!(!matches!(found, Ok(Some(_))), "{what} stored {found:?}");
        let e = s
            .complete(scope, key, 1, None, true, None)
            .await
            .expect_err(&format!("{what}: complete"));
        assert!(
            matches!(
                e.kind,
                ErrorKind::InvalidArgument | ErrorKind::Database | ErrorKind::LeaseLost
            ),
            "{what}: complete: {:?} {e}",
            e.kind
        );
    }
    if let Some(db) = db {
        assert_eq!(Some(records(&db)), before, "{store_name} stored something");
    }
}

on_both_stores!(
    nul_in_scope_or_key,
    nul_in_scope_or_key_memory,
    nul_in_scope_or_key_pg
);

/// A request with U+0000 has no canonical form (the client's IK005 kind says so), so it
/// cannot be fingerprinted and nothing is claimed.
async fn u0000_in_request(
    store_name: &'static str,
    s: Arc<dyn IdempotencyStore>,
    db: Option<Arc<Db>>,
) {
    for request in [
        json!({"v": "a\u{0}b"}),
        json!({"a\u{0}": 1}),
        json!(["\u{0}"]),
    ] {
        let o = BeginOptions {
            request: Some(request.clone()),
            ..BeginOptions::default()
        };
        let what = format!("{store_name}: request {request}");
        let e = s.begin("nul-request", "k", &o).await.expect_err(&what);
        assert_eq!(e.kind, ErrorKind::Uncanonicalizable, "{what}: {e}");
        assert_eq!(s.lookup("nul-request", "k").await.unwrap(), None, "{what}");
    }
    if let Some(db) = db {
        assert!(records(&db).is_empty(), "{store_name} stored something");
    }
}

on_both_stores!(
    u0000_in_request,
    u0000_in_request_memory,
    u0000_in_request_pg
);

/// A response with U+0000 cannot be stored: the completion is refused with a typed error,
/// the claim stays as it was, and the same fence then completes with a storable response.
async fn u0000_in_response(
    store_name: &'static str,
    s: Arc<dyn IdempotencyStore>,
    _db: Option<Arc<Db>>,
) {
    let c = claimed(
        s.begin("nul-response", "k", &BeginOptions::default())
            .await
            .unwrap(),
    );
    for response in [json!({"v": "\u{0}"}), json!({"\u{0}": true})] {
        let what = format!("{store_name}: response {response}");
        let e = s
            .complete("nul-response", "k", c.fence, Some(&response), true, None)
            .await
            .expect_err(&what);
        assert!(
            !matches!(e.kind, ErrorKind::LeaseLost),
            "{what}: {:?} {e}",
            e.kind
        );
        let rec = s.lookup("nul-response", "k").await.unwrap().expect(&what);
        assert_eq!(rec.state, State::InProgress, "{what}");
        assert_eq!(rec.response, None, "{what}");
    }
    let done = s
        .complete(
            "nul-response",
            "k",
            c.fence,
            Some(&json!({"ok": 1})),
            true,
            None,
        )
        .await
        .unwrap();
    assert_eq!(done, Completed::Succeeded, "{store_name}");
}

on_both_stores!(
    u0000_in_response,
    u0000_in_response_memory,
    u0000_in_response_pg
);

/// A provider that answers every request with `body` (raw bytes).
async fn provider(body: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                if read_request(&mut sock).await.is_none() {
                    return;
                }
                let mut resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                resp.extend_from_slice(body);
                let _ = sock.write_all(&resp).await;
            });
        }
    });
    base
}

/// A body that is not UTF-8 reaches the caller as text with U+FFFD, and a repeat replays
/// exactly that value.
async fn web_body_not_utf8(
    store_name: &'static str,
    s: Arc<dyn IdempotencyStore>,
    _db: Option<Arc<Db>>,
) {
    let base = provider(b"\xff\xfe not \xc3\x28 utf-8 \xf0\x9f").await;
    let web = WebExecutor::new(s.clone());
    web.register(Action::new("bytes", Method::POST, format!("{base}/x")))
        .unwrap();
    let input = json!({"store": store_name});
    let first = web.execute("bytes", input.clone()).await.unwrap();
    let Dispatched::Ran(Value::String(text)) = &first else {
        panic!("{store_name}: {first:?}");
    };
    assert!(text.contains('\u{fffd}'), "{store_name}: {text:?}");
    assert!(text.contains(" not "), "{store_name}: {text:?}");
    let again = web.execute("bytes", input).await.unwrap();
    assert_eq!(
        again,
        Dispatched::Replayed(Value::String(text.clone())),
        "{store_name}"
    );
}

on_both_stores!(
    web_body_not_utf8,
    web_body_not_utf8_memory,
    web_body_not_utf8_pg
);

/// A JSON body with U+0000 cannot be remembered: the call answers `Unrecorded` with the
/// body (the side effect happened), and the record holds the client's mark in its place,
/// so that a retry is told so instead of sending the request again.
async fn web_body_with_u0000(
    store_name: &'static str,
    s: Arc<dyn IdempotencyStore>,
    _db: Option<Arc<Db>>,
) {
    let base = provider(br#"{"v": "a\u0000b"}"#).await;
    let web = WebExecutor::new(s.clone());
    web.register(Action::new("nul", Method::POST, format!("{base}/x")))
        .unwrap();
    let input = json!({"store": store_name});
    let got = web.execute("nul", input.clone()).await.unwrap_err();
    assert_eq!(got.kind, ErrorKind::Unrecorded, "{store_name}: {got:?}");
    assert_eq!(
        got.response(),
        Some(&json!({"v": "a\u{0}b"})),
        "{store_name}"
    );
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let rec = s.lookup("nul", &key).await.unwrap().expect("the record");
    assert!(
        pg_idempotency_client::marks::Mark::of(rec.response.as_ref()).is_some(),
        "{store_name}: the result, not the mark, was stored: {rec:?}"
    );
    let again = web.execute("nul", input).await.unwrap_err();
    assert_eq!(again.kind, ErrorKind::Unrecorded, "{store_name}: {again:?}");
    assert!(again.replayed(), "{store_name}");
}

on_both_stores!(
    web_body_with_u0000,
    web_body_with_u0000_memory,
    web_body_with_u0000_pg
);
