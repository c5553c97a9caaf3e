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
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

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

/// Which query arms [`Fault::DropReplyAfterCommit`] on a connection. Queries are the
/// client's simple-protocol `Query` messages and extended-protocol `Parse` messages (the
/// statement's text); tokio-postgres sends one `Parse` per `query`/`execute` of a `&str`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The nth query (counting from 1) the connection sends since it opened.
    NthQuery(u64),
    /// The first query whose text contains this.
    QueryContains(String),
}

impl Trigger {
    fn matches(&self, nth: u64, text: &str) -> bool {
        match self {
            Trigger::NthQuery(n) => nth == *n,
            Trigger::QueryContains(part) => text.contains(part.as_str()),
        }
    }
}

/// What the proxy does to the traffic it forwards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward both ways.
    #[default]
    None,
    /// Once a connection sends a query that matches the trigger: forward the server's reply
    /// up to and including the first CommandComplete after it, withhold everything the
    /// server sends after that (ReadyForQuery included), and once the server's
    /// ReadyForQuery has arrived, close the connection: the client sees an I/O error, no
    /// SQLSTATE, although the server has committed.
    ///
    /// Why wait for ReadyForQuery: with the extended protocol (Parse/Bind/Execute/Sync, what
    /// tokio-postgres speaks) an autocommit statement's implicit transaction commits when
    /// the server processes Sync, after it has sent CommandComplete; ReadyForQuery comes
    /// after the commit. Closing at CommandComplete could close the server side before it
    /// read Sync, and the server would then roll back instead. So the client's bytes keep
    /// flowing as usual (Sync reaches the server), the server's are withheld from the
    /// CommandComplete on, and the close waits for the proof of the commit. With the simple
    /// protocol, ReadyForQuery likewise follows the commit of the query string's implicit
    /// transaction. Inside an explicit transaction block nothing has committed at that
    /// point: trigger on the COMMIT then.
    ///
    /// "First CommandComplete after the trigger" is taken literally: if the triggering
    /// statement fails, the next statement's CommandComplete on that connection is the one;
    /// a query string of several statements is cut after its first.
    DropReplyAfterCommit(Trigger),
    /// Close both sides of a connection once n bytes of server-to-client traffic (counted
    /// from the connection's start) have been forwarded on it; a connection already past n
    /// is closed when the server next sends anything.
    CloseAtByte(u64),
    /// Stop forwarding in both directions without closing: what arrives is held (as a
    /// network partition holds TCP segments) and delivered when the fault is lifted.
    Blackhole,
    /// Deliver each chunk this long after it arrived, in both directions (chunks stay
    /// pipelined: a round trip gains twice the delay).
    Delay(Duration),
    /// Once a connection sends a query that matches the trigger, that connection goes
    /// half-open: from the point [`Cut`] says, nothing more is forwarded in either direction
    /// and nothing is ever delivered later (it is discarded, not held), and neither side's
    /// close is passed on: both sockets stay open and silent until the proxy is dropped.
    /// The client sees a call that never answers; the server sees a peer that says nothing
    /// and never goes away (its kernel still acknowledges segments and keepalive probes, as
    /// a hung client process, a pooler or a stateful middlebox would). Other connections are
    /// untouched. Counted in [`Proxy::fired`] when the connection goes silent.
    HalfOpen(Trigger, Cut),
}

/// Where a [`Fault::HalfOpen`] connection goes silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// At the triggering message: the server never receives it (nor anything after it).
    Request,
    /// After the server ran the triggering statement and committed it: the client's
    /// messages keep flowing until the server's ReadyForQuery after the statement's
    /// CommandComplete (or ErrorResponse), which proves the implicit transaction ended (see
    /// [`Fault::DropReplyAfterCommit`] for why); the server's reply from that
    /// CommandComplete on is discarded. The client never learns that its call committed.
    AfterCommit,
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

/// What the two directions of one connection share.
#[derive(Default)]
struct Conn {
    state: Mutex<ConnState>,
    /// Closes the whole connection (both sockets) when notified.
    kill: Notify,
}

#[derive(Default)]
struct ConnState {
    /// The client sent SSLRequest or GSSENCRequest: the server's next byte is a bare 'S',
    /// 'G' or 'N', not a message.
    answer_byte_next: bool,
    /// Encryption was accepted (or the stream is not PostgreSQL's): nothing can be parsed.
    opaque: bool,
    /// Queries (Query and Parse messages) the client sent.
    queries: u64,
    /// ReadyForQuery messages the client's messages so far will produce: one for the
    /// startup, one per Query, Sync and FunctionCall.
    cycles: u64,
    /// ReadyForQuery messages the server sent.
    ready_seen: u64,
    /// DropReplyAfterCommit: the reply to drop begins after this many ReadyForQuery.
    armed_at: Option<u64>,
    /// DropReplyAfterCommit: the CommandComplete has been forwarded; the rest is withheld.
    dropping: bool,
    /// Server-to-client bytes forwarded on this connection.
    down_bytes: u64,
    /// HalfOpen(_, AfterCommit): the reply to cut begins after this many ReadyForQuery.
    half_open_at: Option<u64>,
    /// HalfOpen(_, AfterCommit): the statement's CommandComplete (or error) came; the
    /// connection goes silent at the next ReadyForQuery.
    half_open_next: bool,
    /// HalfOpen: nothing more is forwarded either way, and no close is passed on.
    silent: bool,
}

async fn connection(
    client: TcpStream,
    upstream: Upstream,
    control: Arc<watch::Sender<Control>>,
    stats: Arc<Stats>,
) {
    // Without it, small messages wait for delayed ACKs: 40 ms per round trip.
    let _ = client.set_nodelay(true);
    let Ok((server_r, server_w)) = connect(&upstream).await else {
        return; // dropping the client's socket closes it, as a refused server would
    };
    let (client_r, client_w) = client.into_split();
    let conn = Arc::new(Conn::default());
    let up = direction(
        Box::new(client_r),
        server_w,
        Side::Up,
        conn.clone(),
        control.clone(),
        stats.clone(),
    );
    let down = direction(
        server_r,
        Box::new(client_w),
        Side::Down,
        conn.clone(),
        control,
        stats,
    );
    // Either both peers close, or a fault (or a failed write) closes both sockets: they are
    // owned by `up` and `down`, dropped on return.
    tokio::select! {
        _ = async { tokio::join!(up, down) } => {}
        _ = conn.kill.notified() => {}
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Bytes read from one side, and when.
struct Chunk {
    at: Instant,
    bytes: Vec<u8>,
}

/// One direction: a reader that stamps what arrives, and a writer that delivers it when
/// the fault allows; a bounded queue between them keeps chunks pipelined under a delay and
/// pushes back on the sender in a blackhole.
async fn direction(
    mut from: Reader,
    to: Writer,
    side: Side,
    conn: Arc<Conn>,
    control: Arc<watch::Sender<Control>>,
    stats: Arc<Stats>,
) {
    let (tx, rx) = mpsc::channel::<Chunk>(64);
    let read = async move {
        loop {
            let mut buf = vec![0u8; 16 * 1024];
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.truncate(n);
                    let chunk = Chunk {
                        at: Instant::now(),
                        bytes: buf,
                    };
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
            }
        }
        // Dropping `tx` tells the writer the side is closed.
    };
    let write = deliver(rx, to, side, conn, control, stats);
    tokio::join!(read, write);
}

/// What to do with one chunk.
struct Verdict {
    /// Forward this many of its bytes.
    forward: usize,
    /// Then close the connection.
    close: bool,
    /// Closing is a fault that fired.
    fired: bool,
}

async fn deliver(
    mut rx: mpsc::Receiver<Chunk>,
    mut to: Writer,
    side: Side,
    conn: Arc<Conn>,
    control: Arc<watch::Sender<Control>>,
    stats: Arc<Stats>,
) {
    let mut seen = control.subscribe();
    let mut framer = Framer::new(side);
    while let Some(chunk) = rx.recv().await {
        if conn.state.lock().unwrap().silent {
            continue; // discarded: a half-open connection never delivers it
        }
        let ctl = held_and_delayed(&mut seen, &chunk, &stats).await;
        let verdict = match side {
            Side::Up => inspect_up(&mut framer, &chunk.bytes, &conn, &ctl, &control, &stats),
            Side::Down => inspect_down(&mut framer, &chunk.bytes, &conn, &ctl, &control, &stats),
        };
        if verdict.forward > 0 {
            if to.write_all(&chunk.bytes[..verdict.forward]).await.is_err() {
                // The peer is gone: so is the connection.
                conn.kill.notify_one();
                return;
            }
            let counter = match side {
                Side::Up => &stats.bytes_up,
                Side::Down => &stats.bytes_down,
            };
            counter.fetch_add(verdict.forward as u64, Ordering::SeqCst);
        }
        if verdict.close {
            if verdict.fired {
                stats.fired.fetch_add(1, Ordering::SeqCst);
            }
            conn.kill.notify_one();
            return;
        }
    }
    // The side closed. A half-open connection passes no close on: the other side's socket
    // stays open (and silent) until the proxy is dropped.
    if conn.state.lock().unwrap().silent {
        std::future::pending::<()>().await;
    }
    // A reply being dropped ends here too: the client must not see a clean end of stream
    // after its CommandComplete.
    if side == Side::Down && conn.state.lock().unwrap().dropping {
        stats.fired.fetch_add(1, Ordering::SeqCst);
        conn.kill.notify_one();
        return;
    }
    let _ = to.shutdown().await;
}

/// Waits while a blackhole holds the chunk and until its delay has passed; the fault in
/// force when it may go.
async fn held_and_delayed(
    seen: &mut watch::Receiver<Control>,
    chunk: &Chunk,
    stats: &Stats,
) -> Control {
    let mut holding = false;
    loop {
        let ctl = seen.borrow_and_update().clone();
        match ctl.fault {
            Fault::Blackhole => {
                // Counted, not claimed: a blackhole stays until it is replaced.
                if !holding {
                    stats.fired.fetch_add(1, Ordering::SeqCst);
                }
                holding = true;
                // The sender lives as long as the proxy; if it is gone, so is this task.
                if seen.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            Fault::Delay(d) => {
                tokio::time::sleep_until(chunk.at + d).await;
                return ctl;
            }
            _ => return ctl,
        }
    }
}

const SSL_REQUEST: u32 = 80877103;
const GSSENC_REQUEST: u32 = 80877104;
const CANCEL_REQUEST: u32 = 80877102;

/// Client to server: follows the startup, counts the exchanges that end in ReadyForQuery,
/// and arms DropReplyAfterCommit at its trigger. Everything is forwarded; the arming
/// happens before the triggering message reaches the server, so before any reply to it.
fn inspect_up(
    framer: &mut Framer,
    bytes: &[u8],
    conn: &Conn,
    ctl: &Control,
    control: &watch::Sender<Control>,
    stats: &Stats,
) -> Verdict {
    let mut st = conn.state.lock().unwrap();
    if st.opaque {
        framer.mode = Mode::Opaque;
    }
    for frame in framer.feed(bytes, |tag| matches!(tag, b'Q' | b'P')) {
        match frame.tag {
            STARTUP => match be_u32(&frame.body) {
                Some(SSL_REQUEST | GSSENC_REQUEST) => {
                    // Answered by one bare byte; a refused client then sends its startup.
                    st.answer_byte_next = true;
                    framer.mode = Mode::Startup;
                }
                // A cancel request is the connection's only message.
                Some(CANCEL_REQUEST) => framer.mode = Mode::Opaque,
                // The startup's exchange ends with the server's first ReadyForQuery.
                _ => st.cycles += 1,
            },
            b'Q' | b'P' => {
                st.queries += 1;
                if st.half_open_at.is_none() {
                    if let Fault::HalfOpen(trigger, cut) = &ctl.fault {
                        if trigger.matches(st.queries, &query_text(frame.tag, &frame.body))
                            && claim(control, ctl)
                        {
                            if *cut == Cut::Request {
                                // The bytes before this message go; it and the rest never.
                                st.silent = true;
                                stats.fired.fetch_add(1, Ordering::SeqCst);
                                return Verdict {
                                    forward: frame.start,
                                    close: false,
                                    fired: false,
                                };
                            }
                            st.half_open_at = Some(st.cycles);
                        }
                    }
                }
                if st.armed_at.is_none() {
                    if let Fault::DropReplyAfterCommit(trigger) = &ctl.fault {
                        if trigger.matches(st.queries, &query_text(frame.tag, &frame.body))
                            && claim(control, ctl)
                        {
                            // The replies to this message follow the ReadyForQuery of every
                            // exchange before it.
                            st.armed_at = Some(st.cycles);
                        }
                    }
                }
                if frame.tag == b'Q' {
                    st.cycles += 1;
                }
            }
            b'S' | b'F' => st.cycles += 1,
            _ => {}
        }
    }
    Verdict {
        forward: bytes.len(),
        close: false,
        fired: false,
    }
}

/// Server to client: cuts a dropped reply after its CommandComplete and closes at the
/// ReadyForQuery that proves the commit; closes at a byte limit.
fn inspect_down(
    framer: &mut Framer,
    bytes: &[u8],
    conn: &Conn,
    ctl: &Control,
    control: &watch::Sender<Control>,
    stats: &Stats,
) -> Verdict {
    let mut st = conn.state.lock().unwrap();
    if std::mem::take(&mut st.answer_byte_next) {
        framer.mode = Mode::AnswerByte;
    }
    let was_dropping = st.dropping;
    // A reply being dropped or cut (half-open) forwards nothing more.
    let mut forward = if was_dropping || st.half_open_next {
        0
    } else {
        bytes.len()
    };
    let mut close = false;
    for frame in framer.feed(bytes, |_| false) {
        if frame.answer {
            if frame.tag != b'N' {
                // TLS or GSS encryption follows: nothing more can be parsed either way.
                st.opaque = true;
                framer.mode = Mode::Opaque;
            }
            continue;
        }
        // HalfOpen(_, AfterCommit): nothing from the statement's CommandComplete (or
        // error) on reaches the client; at the ReadyForQuery that follows, silence.
        if matches!(frame.tag, b'C' | b'E')
            && !st.half_open_next
            && st.half_open_at.is_some_and(|k| st.ready_seen >= k)
        {
            st.half_open_next = true;
            forward = forward.min(frame.start);
        }
        if frame.tag == b'Z' && st.half_open_next {
            st.ready_seen += 1;
            st.silent = true;
            stats.fired.fetch_add(1, Ordering::SeqCst);
            return Verdict {
                forward,
                close: false,
                fired: false,
            };
        }
        match frame.tag {
            b'C' if !st.dropping && st.armed_at.is_some_and(|k| st.ready_seen >= k) => {
                st.dropping = true;
                st.armed_at = None;
                forward = frame.end;
            }
            b'Z' => {
                st.ready_seen += 1;
                if st.dropping {
                    close = true;
                    break;
                }
            }
            _ => {}
        }
    }
    if close {
        return Verdict {
            forward,
            close: true,
            fired: true,
        };
    }
    if let Fault::CloseAtByte(limit) = ctl.fault {
        let room = limit.saturating_sub(st.down_bytes);
        if forward as u64 >= room && claim(control, ctl) {
            st.down_bytes += room;
            return Verdict {
                forward: room as usize,
                close: true,
                fired: true,
            };
        }
    }
    st.down_bytes += forward as u64;
    Verdict {
        forward,
        close: false,
        fired: false,
    }
}

fn be_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// The SQL of a Query (a C string) or a Parse (statement name, then the SQL: C strings).
fn query_text(tag: u8, body: &[u8]) -> String {
    let mut parts = body.split(|b| *b == 0);
    if tag == b'P' {
        parts.next();
    }
    String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned()
}

/// The tag given to a startup-phase message, which has no type byte.
const STARTUP: u8 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The next message has no type byte (the client's first messages).
    Startup,
    /// The next byte is a bare answer to SSLRequest or GSSENCRequest.
    AnswerByte,
    /// Typed messages.
    Typed,
    /// Not parseable (encrypted, or not PostgreSQL): forwarded blindly.
    Opaque,
}

/// A message that ended in the chunk just fed.
#[derive(Debug)]
struct Frame {
    /// Its type byte; `STARTUP` for a startup-phase message; the byte itself for a bare
    /// answer byte.
    tag: u8,
    /// The answer to SSLRequest/GSSENCRequest.
    answer: bool,
    /// Where it begins in the chunk (0 when it began in an earlier chunk).
    start: usize,
    /// Where it ends in the chunk (one past its last byte).
    end: usize,
    /// Its body (after the length), when asked for; a startup message's always.
    body: Vec<u8>,
}

/// Follows message boundaries across the chunks of one direction.
struct Framer {
    mode: Mode,
    /// Header bytes of the current message read so far (4 in startup, 5 typed).
    head: Vec<u8>,
    tag: u8,
    /// Body bytes of the current message still to come.
    left: usize,
    keep: bool,
    body: Vec<u8>,
    /// Where the current message began in the chunk being fed.
    start: usize,
}

impl Framer {
    /// The client's side starts with a startup-phase message; the server's messages are all
    /// typed (but for the bare answer byte, announced by the client's side).
    fn new(side: Side) -> Self {
        Framer {
            mode: match side {
                Side::Up => Mode::Startup,
                Side::Down => Mode::Typed,
            },
            head: Vec::with_capacity(5),
            tag: 0,
            left: 0,
            keep: false,
            body: Vec::new(),
            start: 0,
        }
    }

    /// The messages that end in `chunk`, keeping the bodies of the types `keep` names.
    fn feed(&mut self, chunk: &[u8], keep: impl Fn(u8) -> bool) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut i = 0;
        // A message still open from the last chunk began before this one.
        self.start = 0;
        while i < chunk.len() {
            match self.mode {
                Mode::Opaque => break,
                Mode::AnswerByte => {
                    frames.push(Frame {
                        tag: chunk[i],
                        answer: true,
                        start: i,
                        end: i + 1,
                        body: Vec::new(),
                    });
                    i += 1;
                    self.mode = Mode::Typed;
                    continue;
                }
                Mode::Startup | Mode::Typed => {}
            }
            let startup = self.mode == Mode::Startup;
            let header = if startup { 4 } else { 5 };
            if self.head.is_empty() {
                self.start = i;
            }
            if self.head.len() < header {
                let take = (header - self.head.len()).min(chunk.len() - i);
                self.head.extend_from_slice(&chunk[i..i + take]);
                i += take;
                if self.head.len() < header {
                    break;
                }
                let (tag, len) = if startup {
                    (STARTUP, be_u32(&self.head[0..4]))
                } else {
                    (self.head[0], be_u32(&self.head[1..5]))
                };
                let len = len.unwrap_or(0) as usize;
                // A startup message is small; anything else (a TLS hello sent directly,
                // garbage) is not ours to parse.
                if len < 4 || (startup && !(8..=10_000).contains(&len)) {
                    self.mode = Mode::Opaque;
                    break;
                }
                self.tag = tag;
                self.left = len - 4;
                self.keep = startup || keep(tag);
                self.body.clear();
            }
            let take = self.left.min(chunk.len() - i);
            if self.keep {
                self.body.extend_from_slice(&chunk[i..i + take]);
            }
            i += take;
            self.left -= take;
            if self.left == 0 {
                frames.push(Frame {
                    tag: self.tag,
                    answer: false,
                    start: self.start,
                    end: i,
                    body: std::mem::take(&mut self.body),
                });
                self.head.clear();
                if startup {
                    self.mode = Mode::Typed;
                }
            }
        }
        frames
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
