//! What no store can hold, refused alike by every store before it sends or stores
//! anything: NUL in a scope or key (InvalidArgument), U+0000 in a request
//! (Uncanonicalizable) and U+0000 in a response (InvalidArgument, the claim still held;
//! through the dispatcher, the result is handed back as Unrecorded and marked).
//! The same scenarios run against `MemoryStore`, `RedisStore` (feature `redis`, with
//! `REDIS_URL`) and `PgStore` (`PGIDEM_DSN`); a `PgStore` that cannot connect at all shows
//! that the refusals come before any I/O.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use pg_idempotency_client::*;
use serde_json::json;

fn claimed(b: Begin) -> Claim {
    match b {
        Begin::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// The typed NUL refusal, with the server's kind of texts: what, where, what to do.
fn assert_nul_refused(e: Error, name: &str, what: &str) {
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{what}: {e}");
    assert_eq!(e.message, format!("{name} must not contain NUL"), "{what}");
    assert!(
        e.detail().is_some_and(|d| d.contains("U+0000")),
        "{what}: {:?}",
        e.detail()
    );
    assert_eq!(
        e.hint(),
        Some(format!("Pass a {name} without NUL.").as_str())
    );
}

async fn nul_in_scope_or_key_is_an_argument_error(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("nul");
    let o = BeginOptions::default();
    for (scope, key, name) in [
        (format!("{sc}\0"), "k".to_string(), "scope"),
        (sc.clone(), "k\0".to_string(), "key"),
        ("\0".to_string(), "k".to_string(), "scope"),
        (sc.clone(), "\0".to_string(), "key"),
    ] {
        let what = format!("{scope:?} {key:?}");
        assert_nul_refused(s.begin(&scope, &key, &o).await.unwrap_err(), name, &what);
        assert_nul_refused(s.lookup(&scope, &key).await.unwrap_err(), name, &what);
        assert_nul_refused(
            s.complete(&scope, &key, 1, None, true, None)
                .await
                .unwrap_err(),
            name,
            &what,
        );
        assert_nul_refused(s.release(&scope, &key, 1).await.unwrap_err(), name, &what);
        assert_nul_refused(
            s.extend(&scope, &key, 1, None).await.unwrap_err(),
            name,
            &what,
        );
    }
    // The same names without the NUL are free: nothing was claimed under them.
    claimed(s.begin(&sc, "k", &o).await.unwrap());
}

async fn u0000_in_a_request_is_uncanonicalizable(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("nul-request");
    for request in [
        json!({"v": "a\u{0}b"}),
        json!({"a\u{0}": 1}),
        json!([[["\u{0}"]]]),
    ] {
        let o = BeginOptions {
            request: Some(request.clone()),
            ..BeginOptions::default()
        };
        let e = s.begin(&sc, "k", &o).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Uncanonicalizable, "{request}: {e}");
        assert_eq!(s.lookup(&sc, "k").await.unwrap(), None, "{request}");
    }
}

async fn u0000_in_a_response_leaves_the_claim_held(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("nul-response");
    let c = claimed(s.begin(&sc, "k", &BeginOptions::default()).await.unwrap());
    for (response, succeeded, cache_failure) in [
        (json!({"v": "a\u{0}b"}), true, None),
        (json!({"\u{0}": true}), true, None),
        (json!([{"deep": ["\u{0}"]}]), false, Some(true)),
        // Not even a failure that would not be cached: the server reads the response
        // before it decides, and refuses it there too.
        (json!("\u{0}"), false, Some(false)),
    ] {
        let what = format!("{response} succeeded={succeeded}");
        let e = s
            .complete(&sc, "k", c.fence, Some(&response), succeeded, cache_failure)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{what}: {e}");
        assert_eq!(e.message, "response must not contain U+0000", "{what}");
        let rec = s.lookup(&sc, "k").await.unwrap().expect(&what);
        assert_eq!(rec.state, State::InProgress, "{what}");
        assert_eq!(rec.fence, c.fence, "{what}");
        assert_eq!(rec.response, None, "{what}");
    }
    // Still held by the same fence: its lease extends, and it completes with a response
    // that can be stored.
    s.extend(&sc, "k", c.fence, Some(Duration::from_secs(30)))
        .await
        .unwrap();
    let ok = json!({"v": "a\u{1}b"});
    assert_eq!(
        s.complete(&sc, "k", c.fence, Some(&ok), true, None)
            .await
            .unwrap(),
        Completed::Succeeded
    );
    assert_eq!(
        s.lookup(&sc, "k").await.unwrap().unwrap().response,
        Some(ok)
    );
    // Or, refused, the holder gives the claim up.
    let c = claimed(s.begin(&sc, "k2", &BeginOptions::default()).await.unwrap());
    s.complete(&sc, "k2", c.fence, Some(&json!("\u{0}")), true, None)
        .await
        .unwrap_err();
    s.release(&sc, "k2", c.fence).await.unwrap();
    assert_eq!(s.lookup(&sc, "k2").await.unwrap(), None);
}

/// A tool (a web action alike: `WebExecutor` dispatches the same way) whose result holds
/// U+0000 ran, but its result cannot be remembered: the caller gets `Unrecorded` with the
/// result, and the record holds the client's mark in its place (a success, so that no
/// retry runs the call again): a retry is told the effect happened.
async fn a_tool_result_with_u0000_is_not_remembered(s: Arc<dyn IdempotencyStore>) {
    let agent = Dispatcher::new(s.clone());
    let name = unique("nul-tool");
    agent
        .register(
            ToolSpec::new(
                name.clone(),
                tool_fn(|_| async { Ok::<_, ToolError>(json!({"v": "a\u{0}b"})) }),
            )
            .idempotent(Idempotent::new()),
        )
        .unwrap();
    let input = json!({"n": 1});
    let e = agent.dispatch(&name, input.clone()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unrecorded, "{e}");
    assert_eq!(e.response(), Some(&json!({"v": "a\u{0}b"})));
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
    let rec = s.lookup(&name, &key).await.unwrap().expect("the record");
    assert_eq!(rec.state, State::Succeeded);
    assert!(
        pg_idempotency_client::marks::Mark::of(rec.response.as_ref()).is_some(),
        "{:?}",
        rec.response
    );
    let again = agent.dispatch(&name, input).await.unwrap_err();
    assert_eq!(again.kind, ErrorKind::Unrecorded, "a retry: {again}");
    assert!(again.replayed());
}

macro_rules! suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            async fn store() -> Option<Arc<dyn IdempotencyStore>> {
                $make
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nul_in_scope_or_key() {
                if let Some(s) = store().await {
                    nul_in_scope_or_key_is_an_argument_error(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn u0000_in_request() {
                if let Some(s) = store().await {
                    u0000_in_a_request_is_uncanonicalizable(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn u0000_in_tool_result() {
                if let Some(s) = store().await {
                    a_tool_result_with_u0000_is_not_remembered(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn u0000_in_response() {
                if let Some(s) = store().await {
                    u0000_in_a_response_leaves_the_claim_held(s).await
                }
            }
        }
    };
}

suite!(memory, Some(Arc::new(MemoryStore::new())));
#[cfg(feature = "redis")]
suite!(redis, redis_store().await);
suite!(postgres, Some(Arc::new(PgStore::new(pool()))));

/// A PgStore on a server that does not exist: any I/O would fail with a pool error, so the
/// typed refusals show that nothing was sent.
#[tokio::test]
async fn postgres_refuses_before_any_io() {
    let config: tokio_postgres::Config = "host=/nonexistent/pg_idempotency port=1 user=nobody"
        .parse()
        .unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(1)
        .build()
        .unwrap();
    let s = PgStore::new(pool);
    // The precondition: a call that passes the checks does reach for a connection.
    // (deadpool reports a failed connect as the backend's error, not as a pool error.)
    let unreached = s.lookup("s", "k").await.unwrap_err();
    assert!(
        matches!(unreached.kind, ErrorKind::Database | ErrorKind::Pool),
        "{unreached}"
    );
    let o = BeginOptions::default();
    let kind = |r: Result<Begin>| r.unwrap_err().kind;
    assert_eq!(
        kind(s.begin("s\0", "k", &o).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(s.begin("s", "k\0", &o).await),
        ErrorKind::InvalidArgument
    );
    let nul_request = BeginOptions {
        request: Some(json!({"v": "\u{0}"})),
        ..BeginOptions::default()
    };
    assert_eq!(
        kind(s.begin("s", "k", &nul_request).await),
        ErrorKind::Uncanonicalizable
    );
    let e = s
        .complete("s", "k", 1, Some(&json!(["\u{0}"])), true, None)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    for e in [
        s.lookup("s\0", "k").await.unwrap_err(),
        s.release("s", "\0", 1).await.unwrap_err(),
        s.extend("\0", "k", 1, None).await.unwrap_err(),
        s.complete("s", "k\0", 1, None, true, None)
            .await
            .unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    }
}
