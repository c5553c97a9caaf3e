//! A TCP forwarder between the proxy and the records' database, which a test cuts off and
//! brings back: the store's outage as the proxy sees it, while the database stays up for
//! the test's own connection (which does not pass through here).
//!
//! - `Reach::Up`: everything passes.
//! - `Reach::Down`: every connection through it is closed, and each new one is closed as
//!   it comes.
//! - `Reach::HoldersDown`: connections pass, but one that sends a running call's holder's
//!   statement (`idem_complete`, `idem_extend`, `idem_release`) is closed: a retry's
//!   `begin` reaches the store while the holder still cannot record its result.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;
use tokio_postgres::config::Host;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Up,
    Down,
    HoldersDown,
}

/// The statements only a running call's holder sends.
const HOLDERS: [&[u8]; 3] = [b"idem_complete", b"idem_extend", b"idem_release"];

pub struct CutStore {
    pub port: u16,
    /// The database under test's connection string, through the forwarder.
    pub dsn: String,
    reach: Arc<watch::Sender<Reach>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CutStore {
    fn drop(&mut self) {
        self.task.abort();
        // Every connection's forwarding ends with it.
        self.reach.send_replace(Reach::Down);
    }
}

/// Where the database under test listens.
#[derive(Clone)]
enum Target {
    Unix(std::path::PathBuf),
    Tcp(String, u16),
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

impl Target {
    fn of(dsn: &str) -> Target {
        let config: tokio_postgres::Config = dsn.parse().expect("the DSN under test parses");
        let port = config.get_ports().first().copied().unwrap_or(5432);
        match config.get_hosts().first() {
            Some(Host::Unix(dir)) => Target::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            Some(Host::Tcp(host)) => Target::Tcp(host.clone(), port),
            None => Target::Tcp("localhost".into(), port),
        }
    }

    async fn connect(&self) -> std::io::Result<Box<dyn Stream>> {
        Ok(match self {
            Target::Unix(path) => Box::new(UnixStream::connect(path).await?),
            Target::Tcp(host, port) => Box::new(TcpStream::connect((host.as_str(), *port)).await?),
        })
    }
}

impl CutStore {
    /// A forwarder to the database of `dsn`, up.
    pub async fn start(dsn: &str) -> CutStore {
        let target = Target::of(dsn);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let reach = Arc::new(watch::Sender::new(Reach::Up));
        let task = tokio::spawn({
            let reach = reach.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *reach.borrow() == Reach::Down {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = target.connect().await else {
                        continue;
                    };
                    tokio::spawn(forward(client, server, reach.subscribe()));
                }
            }
        });
        // The same settings, but the host and port: the forwarder's.
        let rest: Vec<&str> = dsn
            .split_whitespace()
            .filter(|p| !p.starts_with("host=") && !p.starts_with("port="))
            .collect();
        let dsn = format!("host=127.0.0.1 port={port} {}", rest.join(" "));
        CutStore {
            port,
            dsn,
            reach,
            task,
        }
    }

    pub fn set(&self, reach: Reach) {
        self.reach.send_replace(reach);
    }
}

async fn forward(client: TcpStream, server: Box<dyn Stream>, mut reach: watch::Receiver<Reach>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = tokio::io::split(server);
    let up = {
        let reach = reach.clone();
        async move {
            let mut buf = vec![0u8; 65536];
            // The end of the previous read: a name split between two reads is still seen.
            let mut tail: Vec<u8> = Vec::new();
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                tail.extend_from_slice(&buf[..n]);
                if *reach.borrow() == Reach::HoldersDown
                    && HOLDERS.iter().any(|name| contains(&tail, name))
                {
                    return;
                }
                let keep = tail.len().saturating_sub(32);
                tail.drain(..keep);
                if sw.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let down = async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
    };
    // Closing on the way to `Down` ends both directions (the streams drop with this task).
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = reach.wait_for(|r| *r == Reach::Down) => {}
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
