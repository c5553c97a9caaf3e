//! A replay is the first answer byte for byte: status, the replayed headers (the default
//! list and `replay_headers`) in order with their repeats and raw bytes, the body;
//! Set-Cookie, hop-by-hop headers, Date and Content-Length are not kept (the last two are
//! the replay's own). attacks.rs has the attacker's side of the same rule.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::Engine;
use pg_idempotency_server::Rule;

use crate::common::*;

fn binary_body() -> Vec<u8> {
    (0..=255u8).cycle().take(4099).collect()
}

fn raw_answer(gate: Gate) -> Router {
    Router::new().route(
        "/files",
        post(move || {
            let gate = gate.clone();
            async move {
                gate.pass().await;
                gate.done();
                let mut r = Response::new(Body::from(binary_body()));
                *r.status_mut() = StatusCode::ACCEPTED;
                let h = r.headers_mut();
                let mut add = |name: &'static str, value: &[u8]| {
                    h.append(
                        HeaderName::from_static(name),
                        HeaderValue::from_bytes(value).unwrap(),
                    );
                };
                add("content-type", b"application/octet-stream");
                add("set-cookie", b"session=abc; HttpOnly");
                add("x-trace", b"1");
                add("set-cookie", b"theme=dark");
                add("set-cookie", b"lang=fr; Path=/");
                // Bytes that are not UTF-8 (obs-text), kept as they are.
                add("x-raw", &[0x80, 0xff, b'a']);
                add("x-trace", b"2");
                // Hop-by-hop: for this connection only, never remembered.
                add("keep-alive", b"timeout=5");
                add("connection", b"x-hop");
                add("x-hop", b"drop me");
                r
            }
        }),
    )
}

const HOP: [&str; 4] = ["keep-alive", "connection", "x-hop", "transfer-encoding"];
const COOKIE: &str = "set-cookie";
const OWN: [&str; 3] = ["date", "content-length", "idempotent-replayed"];

/// The headers as (name, bytes), in order, without `skip`.
fn headers_of(r: &reqwest::Response, skip: &[&str]) -> Vec<(String, Vec<u8>)> {
    r.headers()
        .iter()
        .filter(|(n, _)| !skip.contains(&n.as_str()))
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_body_and_repeated_headers_are_replayed_byte_for_byte() {
    let store = store_on(pool());
    let gate = Gate::open();
    // x-hop is listed too: the response's Connection names it, and that wins.
    let idem = layer(store.clone())
        .rule("/files", Rule::required())
        .replay_headers(["X-Trace", "x-raw", "x-hop"]);
    let base = serve(raw_answer(gate.clone()).route_layer(idem)).await;
    let http = http();
    let (principal, key) = (unique("p"), unique("k"));
    let url = format!("{base}/files");
    let first = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    assert!(!replayed(&first));
    let skip: Vec<&str> = HOP.iter().chain(OWN.iter()).copied().collect();
    // The first caller gets its cookies; a replay never does.
    assert_eq!(first.headers().get_all(COOKIE).iter().count(), 3);
    let replayable: Vec<&str> = skip.iter().copied().chain([COOKIE]).collect();
    let first_headers = headers_of(&first, &replayable);
    assert_eq!(first.bytes().await.unwrap().to_vec(), binary_body());

    let again = keyed(&http, &url, &principal, &key, "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    assert!(replayed(&again));
    for name in HOP {
        assert!(again.headers().get(name).is_none(), "{name} replayed");
    }
    assert!(again.headers().get("date").is_some(), "a fresh Date");
    assert_eq!(header(&again, "content-length"), Some("4099"));
    assert!(again.headers().get(COOKIE).is_none(), "Set-Cookie replayed");
    let traces: Vec<&[u8]> = again
        .headers()
        .get_all("x-trace")
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    assert_eq!(traces, vec![&b"1"[..], b"2"]);
    assert_eq!(
        again.headers().get("x-raw").unwrap().as_bytes(),
        &[0x80, 0xff, b'a']
    );
    assert_eq!(headers_of(&again, &skip), first_headers);
    assert_eq!(again.bytes().await.unwrap().to_vec(), binary_body());
    assert_eq!(gate.runs(), 1);

    // What the store keeps has none of the connection's headers.
    let record = store
        .lookup(&store_scope(&principal, "/files"), &key)
        .await
        .unwrap()
        .unwrap();
    let stored = record.response.unwrap();
    let names: Vec<&str> = stored["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[0].as_str().unwrap())
        .collect();
    for name in HOP.iter().chain(["date", "content-length", COOKIE].iter()) {
        assert!(!names.contains(name), "{name} stored: {names:?}");
    }
    let body = base64::engine::general_purpose::STANDARD
        .decode(stored["body"].as_str().unwrap())
        .unwrap();
    assert_eq!(body, binary_body());
}
