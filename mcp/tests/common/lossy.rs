//! A TCP forwarder in front of the proxy's HTTP port that loses one response: on the
//! first connection whose request carries a `tools/call`, what the proxy answers is read
//! and thrown away until the answer is complete (the proxy's mark in it), and then the
//! connection to the client is closed. The client never sees its answer; the proxy and the
//! server did all their work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Lossy {
    pub port: u16,
    /// Whether the one response was lost yet.
    pub lost: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Lossy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Lossy {
    pub async fn start(target_port: u16) -> Lossy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let lost = Arc::new(AtomicBool::new(false));
        let armed = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn({
            let lost = lost.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let upstream = TcpStream::connect(("127.0.0.1", target_port))
                        .await
                        .unwrap();
                    tokio::spawn(forward(client, upstream, armed.clone(), lost.clone()));
                }
            }
        });
        Lossy { port, lost, task }
    }
}

async fn forward(
    client: TcpStream,
    upstream: TcpStream,
    armed: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
) {
    let (mut cr, mut cw) = client.into_split();
    let (mut ur, mut uw) = upstream.into_split();
    let this_one = Arc::new(AtomicBool::new(false));
    let up = {
        let this_one = this_one.clone();
        async move {
            let mut buf = vec![0u8; 65536];
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if contains(&buf[..n], b"\"tools/call\"") && armed.swap(false, Ordering::SeqCst) {
                    this_one.store(true, Ordering::SeqCst);
                }
                if uw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    };
    let down = async move {
        let mut buf = vec![0u8; 65536];
        let mut seen = Vec::new();
        loop {
            let n = match ur.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if this_one.load(Ordering::SeqCst) {
                seen.extend_from_slice(&buf[..n]);
                if contains(&seen, b"pg-idempotency/call") {
                    // The whole answer was produced; the client gets none of it.
                    lost.store(true, Ordering::SeqCst);
                    let _ = cw.shutdown().await;
                    return;
                }
                continue;
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
