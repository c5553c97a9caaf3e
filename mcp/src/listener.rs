//! The HTTP front's server loop: HTTP/1.1 over hyper, with what `axum::serve` leaves
//! unbounded bounded. A connection must send a request's headers within
//! `limits.header_read_timeout` (also the wait for the next request on a kept-alive
//! connection); a connection on which nothing moves either way for
//! `limits.connection_idle_timeout` is closed; at most `limits.max_connections` are served
//! at once. The next one is accepted, answered `503` with a JSON body naming the limit, and
//! closed: a caller learns at once why, instead of hanging in the kernel's backlog.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Result;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::Limits;

/// Refusals being written at once; past it, a connection over the cap is closed unanswered
/// (each refusal is a task for up to [`REFUSAL_TIME`]: a flood must not make them pile up).
const REFUSALS_AT_ONCE: usize = 64;
/// How long a refusal may take: written, then what the caller sent read and dropped, so
/// that closing sends a FIN and not a reset that could discard the answer unread.
const REFUSAL_TIME: Duration = Duration::from_secs(2);

/// Serves `app` on `listener` until the process stops.
pub async fn serve(listener: TcpListener, app: axum::Router, limits: &Limits) -> Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.get()));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let refusal = Arc::new(refusal_text(limits.max_connections.get()));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let idle = limits.connection_idle_timeout;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                // An answer goes out as a few small writes (headers, then the SSE event):
                // Nagle would hold the second until the client's delayed ACK of the first.
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY cannot be set on a connection");
                }
                stream
            }
            Err(e) => {
                // Out of descriptors, most likely: accepting again at once would spin.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let http = http.clone();
                let app = app.clone();
                tokio::spawn(connection(http, stream, app, slot, idle));
            }
            Err(_) => refuse(stream, &refusals, &refusal),
        }
    }
}

/// One connection, served until it ends, or closed once idle too long.
async fn connection(
    http: hyper::server::conn::http1::Builder,
    stream: TcpStream,
    app: axum::Router,
    _slot: OwnedSemaphorePermit,
    idle: Duration,
) {
    let moved = Arc::new(LastMove::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        moved: moved.clone(),
    });
    let served = http.serve_connection(io, TowerToHyperService::new(app));
    tokio::select! {
        ended = served => {
            if let Err(e) = ended {
                tracing::debug!(error = %e, "a connection ended");
            }
        }
        () = moved.idle_for(idle) => {
            tracing::info!("closing a connection on which nothing moved within limits.connection_idle_timeout");
        }
    }
}

fn refuse(mut stream: TcpStream, refusals: &Arc<Semaphore>, answer: &Arc<String>) {
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        return;
    };
    tracing::warn!("a connection refused: limits.max_connections are open");
    let answer = answer.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tokio::time::timeout(REFUSAL_TIME, async {
            stream.write_all(answer.as_bytes()).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            std::io::Result::Ok(())
        })
        .await;
    });
}

fn refusal_text(limit: usize) -> String {
    let body = serde_json::json!({
        "error": "limit_reached",
        "limit": "limits.max_connections",
        "hint": format!("The proxy serves {limit} connections at once. Retry shortly, and reuse connections (HTTP keep-alive)."),
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// When a byte last moved on a connection, either way.
struct LastMove {
    start: Instant,
    millis: AtomicU64,
}

impl LastMove {
    fn new() -> LastMove {
        LastMove {
            start: Instant::now(),
            millis: AtomicU64::new(0),
        }
    }
    fn moved(&self) {
        self.millis
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    /// Resolves once nothing has moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.millis.load(Ordering::Relaxed));
            let quiet = last.elapsed();
            if quiet >= limit {
                return;
            }
            tokio::time::sleep(limit - quiet).await;
        }
    }
}

/// A socket that records when bytes move.
struct Watched {
    inner: TcpStream,
    moved: Arc<LastMove>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved.moved();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.moved.moved();
        }
        polled
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.moved.moved();
        }
        polled
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
