//! Shared by the layer's suites: a real axum server on 127.0.0.1 behind the layer, over a
//! `PgStore` on the database under test, and handlers the tests can hold and count.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::MatchedPath;
use axum::Router;
use pg_idempotency_client::{IdempotencyStore, PgStore, Record, State};
use pg_idempotency_server::{IdempotencyLayer, Scope};
use tokio::sync::{mpsc, Mutex, Semaphore};

#[allow(unused_imports)] // not every test binary polls
pub use pg_idempotency_tests::{dsn, until, until_async, PATIENCE};

pub fn pool_for(dsn: &str, size: usize) -> deadpool_postgres::Pool {
    let config: tokio_postgres::Config = dsn.parse().expect("PGIDEM_DSN");
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .build()
        .expect("pool")
}

/// A pool on the database under test, large enough for 50 waiting duplicates and the
/// completion they wait for.
pub fn pool() -> deadpool_postgres::Pool {
    pool_for(&dsn(), 64)
}

pub fn store_on(pool: deadpool_postgres::Pool) -> Arc<dyn IdempotencyStore> {
    Arc::new(PgStore::new(pool).statement_mode(statement_mode()))
}

/// How the suite's `PgStore`s send their statements: `PGIDEM_STATEMENTS` (`prepared`, the
/// default, or `unnamed`: the test command's step through PgBouncer in transaction mode
/// sets it).
pub fn statement_mode() -> pg_idempotency_client::StatementMode {
    match std::env::var("PGIDEM_STATEMENTS") {
        Ok(word) => word
            .parse()
            .expect("PGIDEM_STATEMENTS: prepared or unnamed"),
        Err(_) => pg_idempotency_client::StatementMode::default(),
    }
}

/// A name no other test (or earlier run) uses: keys and principals never meet.
pub fn unique(what: &str) -> String {
    pg_idempotency_tests::scope(what)
}

/// The principal is the `x-principal` header (none: refused); the route is axum's
/// matched path.
pub fn scope_of(parts: &http::request::Parts) -> Option<Scope> {
    let principal = parts.headers.get("x-principal")?.to_str().ok()?;
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .map_or_else(|| parts.uri.path().to_string(), |m| m.as_str().to_string());
    Some(Scope::new(principal, route))
}

pub fn layer(store: Arc<dyn IdempotencyStore>) -> IdempotencyLayer {
    IdempotencyLayer::new(store, scope_of)
}

/// Serves `app` on 127.0.0.1 (a port of its own); its base URL.
pub async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// Holds a handler once it has started, until the test lets it go; counts handlers that
/// started and that finished.
#[derive(Clone)]
pub struct Gate {
    started_tx: mpsc::UnboundedSender<()>,
    started_rx: Arc<Mutex<mpsc::UnboundedReceiver<()>>>,
    permits: Arc<Semaphore>,
    pub started: Arc<AtomicUsize>,
    pub finished: Arc<AtomicUsize>,
}

impl Gate {
    /// Closed: every handler waits at `pass` until `open` or `let_one`.
    pub fn closed() -> Gate {
        let (started_tx, started_rx) = mpsc::unbounded_channel();
        Gate {
            started_tx,
            started_rx: Arc::new(Mutex::new(started_rx)),
            permits: Arc::new(Semaphore::new(0)),
            started: Arc::new(AtomicUsize::new(0)),
            finished: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Open: handlers pass at once (still counted).
    pub fn open() -> Gate {
        let g = Gate::closed();
        g.open_all();
        g
    }

    /// In the handler: tells it started, waits for a permit.
    pub async fn pass(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        let _ = self.started_tx.send(());
        self.permits.acquire().await.unwrap().forget();
    }

    /// In the handler, once its work is done.
    pub fn done(&self) -> usize {
        self.finished.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Waits until a handler has started (bounded).
    pub async fn wait_started(&self) {
        tokio::time::timeout(Duration::from_secs(30), self.started_rx.lock().await.recv())
            .await
            .expect("waited 30 s for a handler to start, in vain")
            .unwrap();
    }

    pub fn let_one(&self) {
        self.permits.add_permits(1);
    }

    pub fn open_all(&self) {
        self.permits.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    pub fn runs(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

/// Polls the record of `(scope, key)` until `check` holds (bounded); the record.
pub async fn record_until(
    store: &Arc<dyn IdempotencyStore>,
    scope: &str,
    key: &str,
    what: &str,
    check: impl Fn(Option<&Record>) -> bool,
) -> Option<Record> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let r = store.lookup(scope, key).await.unwrap();
        if check(r.as_ref()) {
            return r;
        }
        assert!(
            Instant::now() < until,
            "waited 30 s for {what}, in vain: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn is_state(r: Option<&Record>, state: State) -> bool {
    r.is_some_and(|r| r.state == state)
}

/// The store scope the layer uses for `principal` on `route`.
pub fn store_scope(principal: &str, route: &str) -> String {
    Scope::new(principal, route).store_scope(128)
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// A keyed POST from `principal`.
pub fn keyed(
    http: &reqwest::Client,
    url: &str,
    principal: &str,
    key: &str,
    body: &'static str,
) -> reqwest::RequestBuilder {
    http.post(url)
        .header("x-principal", principal)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body)
}

pub fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

pub fn replayed(r: &reqwest::Response) -> bool {
    header(r, "idempotent-replayed") == Some("true")
}

/// A problem+json answer: its status and its `type`'s last word.
pub async fn problem(r: reqwest::Response) -> (u16, String, Option<String>) {
    let status = r.status().as_u16();
    let retry_after = header(&r, "retry-after").map(str::to_string);
    assert_eq!(
        header(&r, "content-type"),
        Some("application/problem+json"),
        "{status}"
    );
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], status);
    let kind = body["type"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    (status, kind, retry_after)
}
