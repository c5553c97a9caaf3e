//! A TCP proxy on 127.0.0.1 between PostgreSQL clients and the server, that injects faults
//! into what it forwards. The kernel here has no netem and no toxiproxy can be installed, so
//! the fault suite brings its own: clients connect to `127.0.0.1:<proxy.port()>`, the proxy
//! opens one upstream connection per client (TCP or the server's unix socket) and forwards
//! bytes both ways, unless the fault in force says otherwise.
//!
//! The fault is set with [`Proxy::set`] (it stays until replaced) or [`Proxy::set_once`] (it
//! reverts to [`Fault::None`] when it first fires), and applies at once to new connections
//! and to the traffic of existing ones. [`Proxy::fired`] counts the faults that took effect,
//! [`Proxy::connections`] the connections accepted, and dropping the proxy closes its
//! listener and every connection it forwards.
//!
//! To find where the PostgreSQL protocol's messages begin and end, the proxy follows the
//! framing in both directions (a startup message: 4-byte length including itself, then a
//! 4-byte code; every later message: 1-byte type, then a 4-byte big-endian length including
//! itself). It never changes a byte: it only decides how much to forward, when, and when to
//! close.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

mod fault;
mod forward;
mod framing;
mod inspect;

pub use fault::{Cut, Fault, Trigger};
use forward::*;
use framing::*;
use inspect::*;

/// Where the proxy forwards its connections: the PostgreSQL server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    Tcp(SocketAddr),
    /// The server's socket file, e.g. `<socket dir>/.s.PGSQL.54818`.
    Unix(PathBuf),
}

impl From<SocketAddr> for Upstream {
    fn from(addr: SocketAddr) -> Self {
        Upstream::Tcp(addr)
    }
}

impl From<PathBuf> for Upstream {
    fn from(path: PathBuf) -> Self {
        Upstream::Unix(path)
    }
}

impl Upstream {
    /// The server a libpq-style connection string (`host=... port=...`, no quoting) names:
    /// its unix socket when `host` is a directory (starts with `/`), as libpq does.
    pub fn from_dsn(dsn: &str) -> std::io::Result<Upstream> {
        let host = dsn_value(dsn, "host").unwrap_or("localhost");
        let port: u16 = dsn_value(dsn, "port")
            .unwrap_or("5432")
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        if host.starts_with('/') {
            return Ok(Upstream::Unix(
                PathBuf::from(host).join(format!(".s.PGSQL.{port}")),
            ));
        }
        (host, port)
            .to_socket_addrs()?
            .next()
            .map(Upstream::Tcp)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, host.to_string()))
    }
}

/// The value of `name=value` in a connection string.
fn dsn_value<'a>(dsn: &'a str, name: &str) -> Option<&'a str> {
    dsn.split_whitespace()
        .filter_map(|part| part.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The fault in force, shared by every connection.
#[derive(Debug, Clone, Default)]
struct Control {
    fault: Fault,
    /// Revert to `Fault::None` when it first fires.
    once: bool,
    /// Changes with every `set`, so that a connection claims only the fault it saw.
    generation: u64,
}

/// Claims the right to fire the fault `seen`: false if it has been replaced since, or was a
/// one-shot fault that another connection fired first.
fn claim(control: &watch::Sender<Control>, seen: &Control) -> bool {
    let mut claimed = false;
    control.send_if_modified(|c| {
        if c.generation != seen.generation {
            return false;
        }
        claimed = true;
        if c.once {
            *c = Control {
                fault: Fault::None,
                once: false,
                generation: c.generation + 1,
            };
            return true;
        }
        false
    });
    claimed
}

#[derive(Debug, Default)]
struct Stats {
    connections: AtomicU64,
    fired: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
}

/// The proxy: listens on 127.0.0.1 until dropped.
pub struct Proxy {
    port: u16,
    control: Arc<watch::Sender<Control>>,
    stats: Arc<Stats>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream`, with no fault.
    /// Needs a tokio runtime (connections are tasks on it).
    pub async fn start(upstream: impl Into<Upstream>) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let control = Arc::new(watch::Sender::new(Control::default()));
        let stats = Arc::new(Stats::default());
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream.into(),
            control.clone(),
            stats.clone(),
        ));
        Ok(Proxy {
            port,
            control,
            stats,
            accept,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `dsn` with its host and port replaced by the proxy's.
    pub fn dsn(&self, dsn: &str) -> String {
        let rest: Vec<&str> = dsn
            .split_whitespace()
            .filter(|p| !p.starts_with("host=") && !p.starts_with("port="))
            .collect();
        format!("host=127.0.0.1 port={} {}", self.port, rest.join(" "))
    }

    /// Puts `fault` in force until it is replaced.
    pub fn set(&self, fault: Fault) {
        self.put(fault, false);
    }

    /// Puts `fault` in force until it first fires (then `Fault::None`: the one connection
    /// that fired it is the only one hit) or is replaced. That is for `DropReplyAfterCommit`
    /// and `CloseAtByte`; a `Blackhole` or a `Delay` stays until replaced.
    pub fn set_once(&self, fault: Fault) {
        self.put(fault, true);
    }

    fn put(&self, fault: Fault, once: bool) {
        self.control.send_modify(|c| {
            *c = Control {
                fault,
                once,
                generation: c.generation + 1,
            }
        });
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        self.control.borrow().fault.clone()
    }

    /// How many times a fault took effect: a reply dropped (counted when the connection is
    /// closed), a connection closed at its byte limit, a direction of a connection starting
    /// to hold traffic in a blackhole.
    pub fn fired(&self) -> u64 {
        self.stats.fired.load(Ordering::SeqCst)
    }

    /// How many client connections the proxy accepted.
    pub fn connections(&self) -> u64 {
        self.stats.connections.load(Ordering::SeqCst)
    }

    /// Bytes forwarded from clients to the server, over all connections.
    pub fn bytes_up(&self) -> u64 {
        self.stats.bytes_up.load(Ordering::SeqCst)
    }

    /// Bytes forwarded from the server to clients, over all connections.
    pub fn bytes_down(&self) -> u64 {
        self.stats.bytes_down.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    /// Aborting the accept task drops its listener and its set of connection tasks, which
    /// aborts them and closes their sockets.
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Upstream,
    control: Arc<watch::Sender<Control>>,
    stats: Arc<Stats>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                // An accept error (out of descriptors, a connection reset before it was
                // accepted) concerns that connection only.
                let Ok((client, _)) = accepted else { continue };
                stats.connections.fetch_add(1, Ordering::SeqCst);
                connections.spawn(connection(client, upstream.clone(), control.clone(), stats.clone()));
            }
            // Reap finished connections so that the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

type Reader = Box<dyn AsyncRead + Send + Unpin>;
type Writer = Box<dyn AsyncWrite + Send + Unpin>;

async fn connect(upstream: &Upstream) -> std::io::Result<(Reader, Writer)> {
    match upstream {
        Upstream::Tcp(addr) => {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            let (r, w) = s.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
        Upstream::Unix(path) => {
            let (r, w) = UnixStream::connect(path).await?.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn framer_finds_boundaries_across_any_split() {
        let mut stream = Vec::new();
        let mut startup = (8u32 + 5).to_be_bytes().to_vec();
        startup.extend_from_slice(&196608u32.to_be_bytes());
        startup.extend_from_slice(b"user\0");
        stream.extend_from_slice(&startup);
        stream.extend(typed(b'P', b"\0SELECT 1\0\0\0"));
        stream.extend(typed(b'S', b""));
        stream.extend(typed(b'Q', b"SELECT 2\0"));
        let ends: Vec<usize> = vec![
            startup.len(),
            startup.len() + 17,
            startup.len() + 22,
            stream.len(),
        ];
        for split in 0..=stream.len() {
            let mut f = Framer::new(Side::Up);
            let keep = |t: u8| t == b'P' || t == b'Q';
            let mut got: Vec<(u8, usize, String)> = f
                .feed(&stream[..split], keep)
                .into_iter()
                .map(|fr| (fr.tag, fr.end, query_text(fr.tag, &fr.body)))
                .collect();
            got.extend(
                f.feed(&stream[split..], keep)
                    .into_iter()
                    .map(|fr| (fr.tag, fr.end + split, query_text(fr.tag, &fr.body))),
            );
            let tags: Vec<u8> = got.iter().map(|g| g.0).collect();
            assert_eq!(tags, [STARTUP, b'P', b'S', b'Q'], "split at {split}");
            assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), ends);
            assert_eq!(got[1].2, "SELECT 1");
            assert_eq!(got[3].2, "SELECT 2");
        }
    }

    #[test]
    fn framer_goes_opaque_on_a_direct_tls_hello() {
        let mut f = Framer::new(Side::Up);
        assert!(f
            .feed(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01], |_| true)
            .is_empty());
        assert_eq!(f.mode, Mode::Opaque);
    }

    #[test]
    fn dsn_names_a_unix_socket_or_an_address() {
        assert_eq!(
            Upstream::from_dsn("host=/tmp/sock port=54818 user=postgres").unwrap(),
            Upstream::Unix(PathBuf::from("/tmp/sock/.s.PGSQL.54818"))
        );
        assert_eq!(
            Upstream::from_dsn("user=x host=127.0.0.1 port=5433").unwrap(),
            Upstream::Tcp("127.0.0.1:5433".parse().unwrap())
        );
    }
}
