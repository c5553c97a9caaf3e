//! A small local HTTP service for the toolkit suites: `/ok` answers 200 with how many
//! requests it has had, `/reject` answers 422; every request is counted.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

pub struct Upstream {
    pub base: String,
    pub requests: Arc<AtomicU32>,
}

impl Upstream {
    pub fn requests(&self) -> u32 {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Starts the service on a free loopback port; it lives as long as the test's runtime.
pub async fn start() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicU32::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let counted = counted.clone();
            tokio::spawn(async move {
                let Some(path) = read_request(&mut socket).await else {
                    return;
                };
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                let (status, body) = match path.as_str() {
                    "/ok" => ("200 OK", format!("{{\"n\":{n}}}")),
                    _ => (
                        "422 Unprocessable Entity",
                        "{\"error\":\"rejected\"}".to_string(),
                    ),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    Upstream { base, requests }
}

/// Reads one request (head and content-length body); returns its path.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                let path = head.split_whitespace().nth(1)?;
                return Some(path.split('?').next()?.to_string());
            }
        }
    }
}
