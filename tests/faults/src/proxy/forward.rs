//! One proxied connection: its two directions, and how each delivers what it read under
//! the fault in force.

use super::*;

/// What the two directions of one connection share.
#[derive(Default)]
pub(super) struct Conn {
    pub(super) state: Mutex<ConnState>,
    /// Closes the whole connection (both sockets) when notified.
    pub(super) kill: Notify,
}

#[derive(Default)]
pub(super) struct ConnState {
    /// The client sent SSLRequest or GSSENCRequest: the server's next byte is a bare 'S',
    /// 'G' or 'N', not a message.
    pub(super) answer_byte_next: bool,
    /// Encryption was accepted (or the stream is not PostgreSQL's): nothing can be parsed.
    pub(super) opaque: bool,
    /// Queries (Query and Parse messages) the client sent.
    pub(super) queries: u64,
    /// ReadyForQuery messages the client's messages so far will produce: one for the
    /// startup, one per Query, Sync and FunctionCall.
    pub(super) cycles: u64,
    /// ReadyForQuery messages the server sent.
    pub(super) ready_seen: u64,
    /// DropReplyAfterCommit: the reply to drop begins after this many ReadyForQuery.
    pub(super) armed_at: Option<u64>,
    /// DropReplyAfterCommit: the CommandComplete has been forwarded; the rest is withheld.
    pub(super) dropping: bool,
    /// Server-to-client bytes forwarded on this connection.
    pub(super) down_bytes: u64,
    /// HalfOpen(_, AfterCommit): the reply to cut begins after this many ReadyForQuery.
    pub(super) half_open_at: Option<u64>,
    /// HalfOpen(_, AfterCommit): the statement's CommandComplete (or error) came; the
    /// connection goes silent at the next ReadyForQuery.
    pub(super) half_open_next: bool,
    /// HalfOpen: nothing more is forwarded either way, and no close is passed on.
    pub(super) silent: bool,
}

pub(super) async fn connection(
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
pub(super) enum Side {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Bytes read from one side, and when.
pub(super) struct Chunk {
    pub(super) at: Instant,
    pub(super) bytes: Vec<u8>,
}

/// One direction: a reader that stamps what arrives, and a writer that delivers it when
/// the fault allows; a bounded queue between them keeps chunks pipelined under a delay and
/// pushes back on the sender in a blackhole.
pub(super) async fn direction(
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
pub(super) struct Verdict {
    /// Forward this many of its bytes.
    pub(super) forward: usize,
    /// Then close the connection.
    pub(super) close: bool,
    /// Closing is a fault that fired.
    pub(super) fired: bool,
}

pub(super) async fn deliver(
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
pub(super) async fn held_and_delayed(
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
