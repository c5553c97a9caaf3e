//! The web-service executor against a real local HTTP server that counts requests and
//! records their `Idempotency-Key` headers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotency::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long a test waits for something it is sure will happen before calling it a failure.
const BOUND: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    key: Option<String>,
}

/// A provider: answers `{"n": <request number>}`, except the first request to `/slow`,
/// which it never answers (a provider that took the request and then hung). It counts the
/// requests it has seen on the watch channel.
async fn provider() -> (String, Arc<Mutex<Vec<Seen>>>, watch::Receiver<usize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    let (arrived, arrivals) = watch::channel(0);
    let arrived = Arc::new(arrived);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (log, arrived) = (log.clone(), arrived.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then as much body as Content-Length says.
                let head_end = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let header = |name: &str| {
                    head.lines().find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.trim()
                            .eq_ignore_ascii_case(name)
                            .then(|| v.trim().to_string())
                    })
                };
                let length: usize = header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + length {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let mut first = head.lines().next().unwrap_or("").split(' ');
                let (method, path) = (
                    first.next().unwrap_or("").to_string(),
                    first.next().unwrap_or("").to_string(),
                );
                let (n, first_slow) = {
                    let mut log = log.lock().unwrap();
                    let first_slow = path.starts_with("/slow")
                        && !log.iter().any(|s| s.path.starts_with("/slow"));
                    log.push(Seen {
                        method,
                        path: path.clone(),
                        key: header("idempotency-key"),
                    });
                    (log.len(), first_slow)
                };
                arrived.send_replace(n);
                if first_slow {
                    std::future::pending::<()>().await;
                }
                let body = json!({"n": n}).to_string();
                let resp = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    (base, seen, arrivals)
}

fn store() -> Arc<dyn IdempotencyStore> {
    Arc::new(MemoryStore::new())
}

#[tokio::test]
async fn a_post_retried_three_times_reaches_the_provider_once_with_its_key() {
    let (base, seen, _) = provider().await;
    let web = WebExecutor::new(store());
    web.register(Action::new(
        "charge",
        Method::POST,
        format!("{base}/charges"),
    ))
    .unwrap();
    let input = json!({"amount": 100, "card": "c1"});
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(web.execute("charge", input.clone()).await.unwrap());
    }
    assert_eq!(answers[0], Dispatched::Ran(json!({"n": 1})));
    assert_eq!(answers[1], Dispatched::Replayed(json!({"n": 1})));
    assert_eq!(answers[2], Dispatched::Replayed(json!({"n": 1})));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(
        seen[0].key.as_deref(),
        Some(canon::key_of(&canon::hash_value(&input).unwrap()).as_str())
    );
}

#[tokio::test]
async fn uuid_keys_are_fresh_on_every_call() {
    let (base, seen, _) = provider().await;
    let web = WebExecutor::new(store());
    let uuid = Idempotent {
        strategy: KeyStrategy::Uuid,
        ..Idempotent::default()
    };
    // A side effect that is not deduplicated here must be declared as best effort.
    let required =
        Action::new("ping", Method::POST, format!("{base}/ping")).idempotent(uuid.clone());
    assert_eq!(
        web.register(required).unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    web.register(
        Action::new("ping", Method::POST, format!("{base}/ping"))
            .idempotent(uuid)
            .hint(IdempotencyHint::BestEffort),
    )
    .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            web.execute("ping", json!({"a": 1})).await.unwrap(),
            Dispatched::Ran(_)
        ));
    }
    let keys: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|s| s.key.clone())
        .collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| uuid::Uuid::parse_str(k).is_ok()));
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);
}

#[tokio::test]
async fn get_carries_no_key_but_is_short_circuited() {
    let (base, seen, _) = provider().await;
    let web = WebExecutor::new(store());
    web.register(
        Action::new("lookup", Method::GET, format!("{base}/customers")).params(Params::Query),
    )
    .unwrap();
    let first = web.execute("lookup", json!({"id": "42"})).await.unwrap();
    let second = web.execute("lookup", json!({"id": "42"})).await.unwrap();
    assert_eq!(first, Dispatched::Ran(json!({"n": 1})));
    assert_eq!(second, Dispatched::Replayed(json!({"n": 1})));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].path, "/customers?id=42");
    assert_eq!(seen[0].key, None);
}

#[tokio::test]
async fn a_takeover_sends_the_same_key_again() {
    for which in [UpstreamKey::CallKey, UpstreamKey::Record] {
        let (base, seen, mut arrivals) = provider().await;
        let web = WebExecutor::new(store());
        // The first attempt dies (its timeout fires) after the request went out.
        let policy = Idempotent {
            timeout: Some(Duration::from_millis(300)),
            lease: Some(Duration::from_millis(400)),
            ..Idempotent::default()
        };
        web.register(
            Action::new("send", Method::POST, format!("{base}/slow"))
                .idempotent(policy)
                .upstream_key(which),
        )
        .unwrap();
        let input = json!({"to": "ann@example.com"});
        assert_eq!(
            web.execute("send", input.clone()).await.unwrap_err().kind,
            ErrorKind::Timeout
        );
        tokio::time::timeout(BOUND, arrivals.wait_for(|n| *n == 1))
            .await
            .expect("the first attempt's request never reached the provider")
            .unwrap();
        // Retries are told the call is in progress, and for how long, until its lease
        // lapses; then one takes the claim over and the provider sees the same key again.
        let retry = Retry {
            attempts: 20,
            base: Duration::from_millis(50),
            max: Duration::from_secs(1),
        };
        let taken_over = retry
            .run(|| async {
                Ok(match web.execute("send", input.clone()).await? {
                    Dispatched::InProgress { retry_after } => Attempt::Again {
                        after: Some(retry_after),
                    },
                    done => Attempt::Done(done),
                })
            })
            .await
            .unwrap();
        assert_eq!(taken_over, Dispatched::Ran(json!({"n": 2})), "{which:?}");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{which:?}");
        assert!(seen[0].key.is_some());
        assert_eq!(seen[0].key, seen[1].key, "{which:?}");
        if which == UpstreamKey::Record {
            assert!(uuid::Uuid::parse_str(seen[0].key.as_deref().unwrap()).is_ok());
        }
    }
}

#[tokio::test]
async fn the_key_supplier_is_called_once_per_call() {
    let (base, seen, _) = provider().await;
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let policy = Idempotent {
        strategy: KeyStrategy::explicit(move |v| {
            counter.fetch_add(1, Ordering::SeqCst);
            v["order"].as_str().map(str::to_string)
        }),
        ..Idempotent::default()
    };
    let web = WebExecutor::new(store());
    web.register(Action::new("ship", Method::POST, format!("{base}/shipments")).idempotent(policy))
        .unwrap();
    web.execute("ship", json!({"order": "o-1"})).await.unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(seen.lock().unwrap()[0].key.as_deref(), Some("o-1"));
}

#[tokio::test]
async fn an_unreachable_provider_is_an_http_error_worth_retrying() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = format!("http://{}/charges", listener.local_addr().unwrap());
    drop(listener);
    let web = WebExecutor::new(store());
    web.register(Action::new("charge", Method::POST, gone))
        .unwrap();
    let e = web
        .execute("charge", json!({"amount": 1}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Http);
    assert!(e.retryable());
    // The failure was not cached: the next attempt runs again (and fails the same way).
    assert_eq!(
        web.execute("charge", json!({"amount": 1}))
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Http
    );
}
