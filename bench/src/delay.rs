//! A TCP forwarder that adds a round-trip time: every chunk read from one side is written to
//! the other `rtt / 2` after it arrived, in each direction. Chunks stay ordered and
//! pipelined (a reader never waits for the writer's delay), so a client that sends three
//! statements before reading pays one round trip, as it would on a real network.
//!
//! The kernel here has no netem, and tokio's timer has a 1 ms granularity, so each
//! direction of each connection is a pair of OS threads: a reader that stamps chunks and a
//! writer that sleeps until each chunk is due (with a timer slack of 1 µs, then a short spin
//! for the last microseconds). With `rtt` zero nothing waits: the hop alone, which every
//! network row pays the same, so that 0 ms is a fair baseline for 0.2 and 1 ms.
//!
//! It also counts request turns: a chunk from the client that follows an answer from the
//! server (or opens the connection) starts a new round trip. Requests a client pipelines
//! before it reads count once, which is what a round trip costs.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::harness::BenchResult;

/// The last stretch before a chunk is due is spun rather than slept: a wake-up from sleep
/// can come late by tens of microseconds, a spin does not.
const SPIN: Duration = Duration::from_micros(40);

pub struct DelayProxy {
    addr: SocketAddr,
    turns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl DelayProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr, rtt: Duration) -> BenchResult<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let turns = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (turns.clone(), stop.clone());
        thread::Builder::new()
            .name("delay-accept".into())
            .spawn(move || accept(listener, upstream, rtt / 2, t, s))?;
        Ok(DelayProxy { addr, turns, stop })
    }

    /// Where clients connect (the peers workload passes ports; other rows take this).
    #[allow(dead_code)]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Request turns (round trips a client started) over every connection so far.
    pub fn turns(&self) -> u64 {
        self.turns.load(Ordering::SeqCst)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // The accept loop sees the flag at its next connection: make one.
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    one_way: Duration,
    turns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    for client in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(upstream) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        // Set when the server has answered since the client's last request.
        let answered = Arc::new(AtomicBool::new(true));
        let pumps = [
            (client.try_clone(), server.try_clone(), Some(turns.clone())),
            (server.try_clone(), client.try_clone(), None),
        ];
        for (from, to, counter) in pumps {
            let (Ok(from), Ok(to)) = (from, to) else {
                continue;
            };
            let answered = answered.clone();
            let direction = Direction {
                one_way,
                answered,
                turns: counter,
            };
            let _ = pump(from, to, direction);
        }
    }
}

/// One direction of one connection. `turns` is set on the client-to-server direction only.
struct Direction {
    one_way: Duration,
    answered: Arc<AtomicBool>,
    turns: Option<Arc<AtomicU64>>,
}

fn pump(mut from: TcpStream, mut to: TcpStream, d: Direction) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let one_way = d.one_way;
    thread::Builder::new()
        .name("delay-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let arrived = Instant::now();
                match &d.turns {
                    Some(turns) => {
                        if d.answered.swap(false, Ordering::SeqCst) {
                            turns.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    None => d.answered.store(true, Ordering::SeqCst),
                }
                if tx.send((arrived, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
            // Dropping tx tells the writer that this side is done, after what is queued.
        })?;
    thread::Builder::new()
        .name("delay-write".into())
        .spawn(move || {
            precise_timers();
            while let Ok((arrived, chunk)) = rx.recv() {
                wait_until(arrived + one_way);
                if to.write_all(&chunk).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

/// Asks the kernel to wake this thread's sleeps within 1 µs of their deadline instead of
/// its default slack of 50 µs, which alone would be a quarter of a 0.2 ms round trip.
fn precise_timers() {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes one integer argument and changes only the
    // calling thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

fn wait_until(due: Instant) {
    loop {
        let now = Instant::now();
        if now >= due {
            return;
        }
        let left = due - now;
        if left > SPIN {
            thread::sleep(left - SPIN);
        } else {
            std::hint::spin_loop();
        }
    }
}
