//! A provider on a real local socket: it logs every request (method, path with its query,
//! `Idempotency-Key`, body) and answers by path, so that a test picks the provider's
//! behaviour by the endpoint it declares:
//!
//! - `/slow/...`: the first request to that exact path is never answered (a provider that
//!   took the request and hung); later ones are answered like any other.
//! - `/status/<code>/...`: always answers `<code>`.
//! - `/flaky/<code>/<times>/...`: answers `<code>` to the first `<times>` requests to that
//!   exact path, then 200.
//! - `/after/<secs>/<code>/<times>/...`: as `flaky`, with `Retry-After: <secs>` on the
//!   error answers; `/after-date/...` the same with an HTTP date `<secs>` from now.
//! - `/auth/<token>/...`: 401 unless the request carries `Authorization: Bearer <token>`
//!   (an API that refuses a caller without the right credentials).
//! - anything else: 200.
//!
//! A 200 (or any other answer) carries `{"n": <request number>}`, so a replay is told from a
//! second request by its number. The count of requests seen is on a watch channel.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::common::raw_http::read_request;

/// How long a test waits for something it is sure will happen before calling it a failure.
pub const BOUND: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path with its query string.
    pub path: String,
    pub key: Option<String>,
    pub body: String,
    /// Every header line, names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    /// The values of a header (any case), in the order sent.
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

pub struct Provider {
    pub base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    arrivals: watch::Receiver<usize>,
}

impl Provider {
    /// The requests seen so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests seen so far to this path (query string excluded).
    pub fn seen_at(&self, path: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.split('?').next() == Some(path))
            .collect()
    }

    /// Waits until the provider has seen `n` requests to `path` in all.
    pub async fn wait_for(&self, path: &str, n: usize) {
        let mut arrivals = self.arrivals.clone();
        tokio::time::timeout(BOUND, async {
            loop {
                if self.seen_at(path).len() >= n {
                    return;
                }
                arrivals.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{path} never got {n} requests"));
    }
}

/// What the provider answers a request to `path`, given the requests to that exact path
/// before it (`earlier`) and its `Authorization`: the status and a `Retry-After` if any;
/// None to never answer.
fn answer(
    path: &str,
    earlier: usize,
    authorization: Option<&str>,
) -> Option<(u16, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let flaky = |code: &str, times: &str| {
        if earlier < times.parse().unwrap() {
            code.parse().unwrap()
        } else {
            200
        }
    };
    match parts.as_slice() {
        ["slow", ..] => (earlier > 0).then_some((200, None)),
        ["status", code, ..] => Some((code.parse().unwrap(), None)),
        ["auth", token, ..] => {
            let expected = format!("Bearer {token}");
            Some((
                if authorization == Some(expected.as_str()) {
                    200
                } else {
                    401
                },
                None,
            ))
        }
        ["flaky", code, times, ..] => Some((flaky(code, times), None)),
        [form @ ("after" | "after-date"), secs, code, times, ..] => {
            let status = flaky(code, times);
            let advice = if *form == "after" {
                secs.to_string()
            } else {
                let at = std::time::SystemTime::now() + Duration::from_secs(secs.parse().unwrap());
                httpdate::fmt_http_date(at)
            };
            Some((status, (status != 200).then_some(advice)))
        }
        _ => Some((200, None)),
    }
}

fn header_lines(head: &str) -> Vec<(String, String)> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect()
}

fn reason(code: u16) -> &'static str {
    reqwest::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Whatever")
}

pub async fn provider() -> Provider {
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
                let Some(request) = read_request(&mut sock).await else {
                    return;
                };
                let (method, path) = request.method_and_path();
                let bare = path.split('?').next().unwrap_or("").to_string();
                let (n, status) = {
                    let mut log = log.lock().unwrap();
                    let earlier = log
                        .iter()
                        .filter(|s| s.path.split('?').next() == Some(&bare))
                        .count();
                    let authorization = request.header("authorization");
                    log.push(Seen {
                        method: method.clone(),
                        path,
                        key: request.header("idempotency-key"),
                        body: String::from_utf8_lossy(&request.body).to_string(),
                        headers: header_lines(&request.head),
                    });
                    (log.len(), answer(&bare, earlier, authorization.as_deref()))
                };
                arrived.send_replace(n);
                let Some((status, retry_after)) = status else {
                    return std::future::pending::<()>().await;
                };
                // A HEAD answer has the head only.
                let body = if method == "HEAD" {
                    String::new()
                } else {
                    json!({"n": n}).to_string()
                };
                let advice = retry_after
                    .map(|v| format!("retry-after: {v}\r\n"))
                    .unwrap_or_default();
                let resp = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{advice}connection: close\r\n\r\n{body}",
                    reason(status),
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Provider {
        base,
        seen,
        arrivals,
    }
}
