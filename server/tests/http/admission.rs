//! Which requests the layer keys and which it refuses before the handler: the key's
//! presence and form, the principal, the body's size, and a key reused with another
//! request.

use axum::http::{HeaderValue, StatusCode};
use axum::routing::post;
use axum::Router;
use pg_idempotency_server::Rule;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;
use crate::http::running::charge;

/// The charge route and a refund route with the same handler, both required, and an
/// optional route.
async fn app(
    gate: &Gate,
    configure: impl FnOnce(
        pg_idempotency_server::IdempotencyLayer,
    ) -> pg_idempotency_server::IdempotencyLayer,
) -> String {
    let store = store_on(pool());
    let g = gate.clone();
    let refunds = Router::new().route(
        "/refunds",
        post(move || {
            let g = g.clone();
            async move {
                g.pass().await;
                format!("refund {}", g.done())
            }
        }),
    );
    let g = gate.clone();
    let notes = Router::new().route(
        "/notes",
        post(move || {
            let g = g.clone();
            async move {
                g.pass().await;
                format!("note {}", g.done())
            }
        })
        .get(|| async { "read" }),
    );
    let idem = configure(
        layer(store)
            .rule("/charges", Rule::required())
            .rule("/refunds", Rule::required())
            .rule("/notes", Rule::optional()),
    );
    serve(
        charge(gate.clone())
            .merge(refunds)
            .merge(notes)
            .route_layer(idem),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_on_a_required_route_is_400_and_optional_routes_run_unkeyed() {
    let gate = Gate::open();
    let base = app(&gate, |l| l).await;
    let http = http();
    let r = http
        .post(format!("{base}/charges"))
        .header("x-principal", unique("p"))
        .body("{}")
        .send()
        .await
        .unwrap();
    let (status, kind, _) = problem(r).await;
    assert_eq!((status, kind.as_str()), (400, "missing-idempotency-key"));
    assert_eq!(gate.runs(), 0);
    for _ in 0..2 {
        let r = http
            .post(format!("{base}/notes"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "no key, no principal needed");
    }
    assert_eq!(gate.runs(), 2, "an unkeyed request runs every time");
    // GET is not keyed, a key or not.
    let r = http
        .get(format!("{base}/notes"))
        .header("idempotency-key", "")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_400_and_never_reach_the_handler() {
    let gate = Gate::open();
    let base = app(&gate, |l| l.max_key_bytes(40)).await;
    let http = http();
    let url = format!("{base}/charges");
    let bad: Vec<(&str, HeaderValue)> = vec![
        ("empty", HeaderValue::from_static("")),
        ("empty sf-string", HeaderValue::from_static("\"\"")),
        (
            "not ASCII",
            HeaderValue::from_bytes("clé-1".as_bytes()).unwrap(),
        ),
        ("too long", HeaderValue::from_str(&"k".repeat(41)).unwrap()),
        ("unterminated sf-string", HeaderValue::from_static("\"abc")),
    ];
    for (case, value) in bad {
        let r = http
            .post(&url)
            .header("x-principal", "p")
            .header("idempotency-key", value)
            .send()
            .await
            .unwrap();
        let (status, kind, _) = problem(r).await;
        assert_eq!(
            (status, kind.as_str()),
            (400, "invalid-idempotency-key"),
            "{case}"
        );
    }
    let r = http
        .post(&url)
        .header("x-principal", "p")
        .header("idempotency-key", "a")
        .header("idempotency-key", "b")
        .send()
        .await
        .unwrap();
    assert_eq!(problem(r).await.0, 400, "two keys");
    // The longest key allowed, and the same key quoted (sf-string) and bare: one call.
    let principal = unique("p");
    let longest = "k".repeat(40);
    let ok = keyed(&http, &url, &principal, &longest, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);
    let quoted = keyed(&http, &url, &principal, &format!("\"{longest}\""), "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&quoted), "the sf-string form names the same key");
    assert_eq!(gate.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_request_without_a_principal_is_401() {
    let gate = Gate::open();
    let base = app(&gate, |l| l).await;
    let r = http()
        .post(format!("{base}/charges"))
        .header("idempotency-key", unique("k"))
        .send()
        .await
        .unwrap();
    let (status, kind, _) = problem(r).await;
    assert_eq!((status, kind.as_str()), (401, "no-principal"));
    assert_eq!(gate.runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_on_another_route_or_from_another_principal_is_independent() {
    let gate = Gate::open();
    let base = app(&gate, |l| l).await;
    let http = http();
    let key = unique("k");
    let (ann, bob) = (unique("ann"), unique("bob"));
    let a = keyed(&http, &format!("{base}/charges"), &ann, &key, "{}")
        .send()
        .await
        .unwrap();
    let b = keyed(&http, &format!("{base}/charges"), &bob, &key, "{}")
        .send()
        .await
        .unwrap();
    let c = keyed(&http, &format!("{base}/refunds"), &ann, &key, "{}")
        .send()
        .await
        .unwrap();
    for r in [&a, &b, &c] {
        assert!(r.status().is_success());
        assert!(!replayed(r), "{:?}", r.url());
    }
    assert_eq!(c.text().await.unwrap(), "refund 3");
    assert_eq!(gate.runs(), 3);
    let again = keyed(&http, &format!("{base}/refunds"), &ann, &key, "{}")
        .send()
        .await
        .unwrap();
    assert!(replayed(&again));
    assert_eq!(again.text().await.unwrap(), "refund 3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_body_under_the_same_key_is_422_or_the_configured_status() {
    for (configured, expected) in [(None, 422), (Some(StatusCode::CONFLICT), 409)] {
        let gate = Gate::open();
        let base = app(&gate, |l| match configured {
            Some(s) => l.mismatch_status(s),
            None => l,
        })
        .await;
        let http = http();
        let (p, k) = (unique("p"), unique("k"));
        let url = format!("{base}/charges");
        let first = keyed(&http, &url, &p, &k, "{\"amount\": 5}")
            .send()
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::CREATED);
        let changed = keyed(&http, &url, &p, &k, "{\"amount\": 6}")
            .send()
            .await
            .unwrap();
        let (status, kind, _) = problem(changed).await;
        assert_eq!(
            (status, kind.as_str()),
            (expected, "idempotency-key-mismatch")
        );
        // Another query string is another request too.
        let query = keyed(
            &http,
            &format!("{url}?currency=eur"),
            &p,
            &k,
            "{\"amount\": 5}",
        )
        .send()
        .await
        .unwrap();
        assert_eq!(query.status().as_u16(), expected);
        assert_eq!(gate.runs(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatch_wins_over_in_progress() {
    let gate = Gate::closed();
    let base = app(&gate, |l| l).await;
    let http = http();
    let (p, k) = (unique("p"), unique("k"));
    let url = format!("{base}/charges");
    let first = tokio::spawn(keyed(&http, &url, &p, &k, "{\"amount\": 5}").send());
    gate.wait_started().await;
    let changed = keyed(&http, &url, &p, &k, "{\"amount\": 6}")
        .send()
        .await
        .unwrap();
    let (status, kind, _) = problem(changed).await;
    assert_eq!((status, kind.as_str()), (422, "idempotency-key-mismatch"));
    let same = keyed(&http, &url, &p, &k, "{\"amount\": 5}")
        .send()
        .await
        .unwrap();
    assert_eq!(problem(same).await.0, 409, "the same request: in progress");
    gate.open_all();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
}

/// A chunked request (no Content-Length), sent by hand.
async fn chunked_post(base: &str, path: &str, principal: &str, key: &str, body: &[u8]) -> u16 {
    let addr = base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nx-principal: {principal}\r\nidempotency-key: {key}\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    );
    // One write: the server may answer 413 and close once it has read past the cap, and
    // a request still being written then would meet a reset.
    let mut request = head.into_bytes();
    for chunk in body.chunks(1000) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    s.write_all(&request).await.unwrap();
    let mut answer = Vec::new();
    // The server may answer before it read everything, and close.
    let _ = s.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_cap_is_413_with_or_without_content_length() {
    let gate = Gate::open();
    let base = app(&gate, |l| l.max_body_bytes(4096)).await;
    let http = http();
    let url = format!("{base}/charges");
    let big = vec![b'x'; 4097];
    let r = http
        .post(&url)
        .header("x-principal", "p")
        .header("idempotency-key", unique("k"))
        .body(big.clone())
        .send()
        .await
        .unwrap();
    let (status, kind, _) = problem(r).await;
    assert_eq!((status, kind.as_str()), (413, "body-too-large"));
    assert_eq!(
        chunked_post(&base, "/charges", "p", &unique("k"), &big).await,
        413
    );
    // At the cap: runs.
    assert_eq!(
        chunked_post(&base, "/charges", "p", &unique("k"), &big[..4096]).await,
        201
    );
    assert_eq!(gate.runs(), 1);
}
