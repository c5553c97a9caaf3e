//! A server clock the test moves: the server under test is started with libfaketime
//! preloaded (`LD_PRELOAD`), which reads the clock's offset from a file on every call
//! (`FAKETIME_NO_CACHE`), so writing "+120" or "-300" into the file steps the wall clock
//! of every server process (each forked from the postmaster, each preloading it) by that
//! many seconds from the real clock at once, as an NTP step or an operator's `date -s`
//! would. The monotonic clock is left alone, as a real step leaves it.
//!
//! One limit of libfaketime: it runs the real `select()` with faking off, and PostgreSQL
//! 15's postmaster (before 16, which moved the work out of its signal handlers) forks
//! background workers from its signal handlers while it waits in `select()`. Such a worker
//! inherits "faking off" for good and reads the real clock. A worker the postmaster
//! restarts later is forked from its main loop and fakes; [`worker_follows`] sees to it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::Client;

/// Where Debian's libfaketime package puts the library (multiarch folders).
const LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
    "/usr/lib/faketime",
    "/usr/local/lib/faketime",
];

/// The libfaketime library, when it is installed (Debian package libfaketime).
pub fn library() -> Option<PathBuf> {
    LIBRARY_DIRS
        .iter()
        .map(|d| Path::new(d).join("libfaketime.so.1"))
        .find(|p| p.is_file())
}

/// Why a test of the clock cannot run here.
pub const MISSING: &str = "libfaketime is not installed (Debian package libfaketime, which \
     scripts/setup.sh installs as root): the server's clock cannot be moved";

/// The offset file of one server: what its clock is set to, relative to the real clock.
pub struct FakeClock {
    path: PathBuf,
    library: PathBuf,
    offset: i64,
}

impl FakeClock {
    /// A clock file at `path` (readable by the server's OS user), set to `offset` seconds
    /// from the real clock; None when libfaketime is not installed.
    pub fn new(path: PathBuf, offset: i64) -> Option<FakeClock> {
        let library = library()?;
        let clock = FakeClock {
            path,
            library,
            offset,
        };
        clock.write(offset);
        Some(clock)
    }

    /// The environment the server is started with.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", self.library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.path.display().to_string()),
            // Read the file on every call: a step is seen by every process at once.
            ("FAKETIME_NO_CACHE", "1".into()),
            // A real step moves the wall clock only; timeouts and latches keep their
            // monotonic clock.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }

    /// The offset the clock is set to, in seconds.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// Steps the server's clock to `seconds` from the real clock (a step of `seconds` minus
    /// the current offset). Returns at once; see [`FakeClock::seen_by`].
    pub fn set(&mut self, seconds: i64) {
        self.write(seconds);
        self.offset = seconds;
    }

    fn write(&self, seconds: i64) {
        // Written aside and renamed: a server process never reads half a file.
        let aside = self.path.with_extension("next");
        std::fs::write(&aside, format!("{seconds:+}\n"))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", aside.display()));
        std::fs::rename(&aside, &self.path)
            .unwrap_or_else(|e| panic!("cannot rename to {}: {e}", self.path.display()));
    }

    /// Waits until the server's clock, read through `c`, is the real clock plus the set
    /// offset (within a second): the step has been taken. Panics after ten seconds.
    pub async fn seen_by(&self, c: &Client) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let off = server_offset_micros(c).await;
            if (off - self.offset * 1_000_000).abs() < 1_000_000 {
                return;
            }
            assert!(
                Instant::now() < until,
                "the server's clock is {} s from the real clock, not the {} s its clock file says",
                off as f64 / 1e6,
                self.offset
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The real clock, in microseconds since the epoch.
pub fn real_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// How far the server's clock (`clock_timestamp()`) is from the real clock, in
/// microseconds (the middle of the round trip is taken as the moment it was read).
pub async fn server_offset_micros(c: &Client) -> i64 {
    let before = real_micros();
    let server: i64 = c
        .query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("reading the server's clock: {e}"))
        .get(0);
    let after = real_micros();
    server - (before + after) / 2
}

/// Makes sure the background worker `backend_type` (one process) reads the fake clock,
/// restarting it while it does not (see the module's note on PostgreSQL 15); `c` is a
/// superuser session. The clock must have been at least `probe` seconds from the real one
/// (either way) since before the worker started: its `backend_start` then tells which clock
/// it reads. Each restart waits for the postmaster's restart interval.
pub async fn worker_follows(c: &Client, backend_type: &str, probe: i64) {
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let row = c
            .query_opt(
                "SELECT pid, (extract(epoch FROM backend_start) * 1000000)::bigint \
                 FROM pg_stat_activity WHERE backend_type = $1",
                &[&backend_type],
            )
            .await
            .unwrap_or_else(|e| panic!("reading pg_stat_activity: {e}"));
        if let Some(row) = row {
            let (pid, started): (i32, i64) = (row.get(0), row.get(1));
            // Started within the last minute and a half, on the real clock or on one
            // `probe` seconds away from it.
            if (started - real_micros()).abs() > probe.abs() * 1_000_000 / 2 {
                return;
            }
            eprintln!(
                "the {backend_type} (pid {pid}) reads the real clock: restarting it (see \
                 fake_clock.rs)"
            );
            c.execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap_or_else(|e| panic!("pg_terminate_backend: {e}"));
            while c
                .query_opt("SELECT FROM pg_stat_activity WHERE pid = $1", &[&pid])
                .await
                .unwrap()
                .is_some()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        assert!(
            Instant::now() < until,
            "the {backend_type} never came back reading the fake clock"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
