//! F10, the disk fills up: the server under test (a throwaway server) keeps part of its
//! files on a small tmpfs of its own, mounted by the test; while client tasks race on keys
//! through plain SQL, a filler file is written there until the kernel answers ENOSPC (the
//! volume is then kept full: space the server frees is taken again), at a point paced by
//! the run's progress; later the filler is deleted, and a server that did not come back by
//! itself is started as an operator would (`pg_ctl start`). The calls go on throughout.
//!
//! Two volumes, one test each:
//! - **data**: the database under test lives in a tablespace on the tmpfs (its tables and
//!   indexes; the WAL stays on the data directory's disk). A statement that must extend a
//!   file fails with SQLSTATE 53100 (disk_full): a definite failure, nothing of it
//!   committed; the server keeps running.
//! - **wal**: the WAL (`initdb --waldir`, 1 MB segments) is on the tmpfs, and a replication
//!   slot nobody reads (a standby gone for good) keeps every segment from the fill on, as
//!   in practice: a checkpoint otherwise recycles old segments as the next ones, and a full
//!   volume alone would not bite. A backend that cannot create the next segment PANICs;
//!   the postmaster ends every session and restarts; crash recovery may itself need WAL
//!   space, and the server then stays down until the space is freed and it is started
//!   again. The operator also drops the slot.
//!
//! Whatever the disk did, the run is checked (I1-I6; I5 from a record monitor: nothing seen
//! committed may vanish), and the test asserts that the fault fired: the volume was full
//! (no free block at the fill), calls failed with 53100 (data) or the server crashed and
//! restarted with unknown outcomes at the clients (wal). Needs root (or CAP_SYS_ADMIN) to
//! mount the tmpfs; skipped, saying so, otherwise.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pg_idempotency_faults::check::{self, Violation};
use pg_idempotency_faults::crash_server::{self, CrashServer, Setup};
use pg_idempotency_faults::history::{Op, Outcome, Run};
use pg_idempotency_faults::ledger;
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Progress};
use pg_idempotency_tests::{self as suite, Skip};

const LEASE: &str = "300 milliseconds";
const PROCESSES: usize = 6;
/// Calls per task: on the WAL volume, enough that the run writes the segments it takes
/// for the server to need a new one while the volume is full.
fn calls(volume: Volume) -> usize {
    match volume {
        Volume::Data => 150,
        Volume::Wal => 2000,
    }
}
/// Keys: many, so that fresh keys keep coming all through a run: records keep being
/// inserted (the tables grow) and most calls write (claim and complete) rather than replay,
/// so the WAL grows too.
fn keys(volume: Volume) -> usize {
    match volume {
        Volume::Data => 400,
        Volume::Wal => 6000,
    }
}
/// The disk fills after at least this many operations, plus a random part of as many again.
const FILL_AFTER: usize = 150;
/// It stays full for this many operations (on the WAL volume: counted from the server's
/// first PANIC, since the WAL fills only when a new segment is needed)...
const FULL_FOR: usize = 300;
/// ...or at most this long (the operator's reaction), or until the server is down.
const FULL_AT_MOST: Duration = Duration::from_secs(15);
/// The size of the tmpfs.
const VOLUME: &str = "64m";
/// Free space on the volume right after the fill that still counts as full: none, but a
/// block the server freed in between may be read.
const FULL_BELOW: u64 = 64 * 1024;
const DISK_FULL: &str = "53100";

/// Which of the server's files the full volume holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Volume {
    /// The database under test (a tablespace).
    Data,
    /// The WAL.
    Wal,
}

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `VOLUME` at a new folder named after `name`, owned by the server's
    /// OS user; why not, when it cannot (not root, no CAP_SYS_ADMIN).
    fn mount(name: &str) -> Result<Tmpfs, String> {
        let dir = suite::root()
            .join("target/temp-clusters")
            .join(format!("{name}-volume-{}", std::process::id()));
        let _ = Command::new("umount").arg(&dir).output();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot make the mount point {}: {e}", dir.display()))?;
        let owner = Command::new("id")
            .arg("-u")
            .arg("postgres")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        let mut options = format!("size={VOLUME},mode=0700");
        if let (Some(uid), true) = (owner, is_root()) {
            options.push_str(&format!(",uid={uid},gid={uid}"));
        }
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "mounting a tmpfs needs root or CAP_SYS_ADMIN: mount -t tmpfs said: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Writes to the filler file until the volume has no block left; the bytes then free.
    fn fill(&self) -> u64 {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler())
            .unwrap_or_else(|e| panic!("filler: {e}"));
        // Big writes first, then one block at a time, until even a block does not fit.
        for size in [1 << 20, 4096] {
            let chunk = vec![0xA5u8; size];
            loop {
                match f.write(&chunk) {
                    Ok(n) if n == size => {}
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(28) => break,
                    Err(e) => panic!("filler: {e}"),
                }
            }
        }
        free_bytes(&self.dir)
    }

    /// Deletes the filler file: the space comes back.
    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap_or_else(|e| panic!("rm filler: {e}"));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // A server still running on it (a failed test) keeps it busy: detach it lazily.
        let done = Command::new("umount")
            .arg(&self.dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if !done {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Bytes available on the file system of `dir` (statvfs, through `stat -f`).
fn free_bytes(dir: &Path) -> u64 {
    let out = Command::new("stat")
        .args(["-f", "-c", "%a %S"])
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("stat -f: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text
        .split_whitespace()
        .map(|p| p.parse::<u64>().unwrap_or(0));
    parts.next().unwrap_or(0) * parts.next().unwrap_or(0)
}

/// What the disk task did in one trial.
#[derive(Debug, Default, Clone, Copy)]
struct Filled {
    /// Times the volume was filled (0 when the run ended first).
    fills: usize,
    /// The most free space read right after a fill.
    free_after_fill: u64,
    /// Times the filler took space again that the server had freed while the disk was full.
    refills: usize,
    /// Times the server was down (its postmaster gone) and started by hand.
    operator_starts: usize,
    /// How long the volume was held full.
    held: Duration,
}

/// Fills the volume once the run reached a random point, holds it full, frees it, and
/// starts the server again whenever it is down until the run ends.
async fn disk(
    server: Arc<CrashServer>,
    volume: Arc<Tmpfs>,
    kind: Volume,
    progress: Progress,
    seed: u64,
) -> Filled {
    let mut choices = Choices::new(seed);
    let mut filled = Filled::default();
    let fill_at = FILL_AFTER + choices.below(FILL_AFTER);
    let pace = progress.reached(fill_at).await;
    if pace.ended {
        return filled;
    }
    // The WAL volume's own session: it keeps the slot and, once the volume is full, moves
    // the WAL on to the segments that need space.
    let mut wal_session = None;
    if kind == Volume::Wal {
        // What fills a WAL volume in practice: WAL the server may not recycle. A checkpoint
        // recycles old segments as the next ones, so a full volume alone only bites when a
        // checkpoint falls behind; a replication slot nobody reads (a standby gone for
        // good) keeps every segment from now on, and each new one needs space.
        let c = crash_server::connect_when_up(&server.dsn()).await;
        c.batch_execute(&format!(
            "SELECT pg_create_physical_replication_slot('{SLOT}', true)"
        ))
        .await
        .unwrap_or_else(|e| panic!("create slot: {e}"));
        wal_session = Some(c);
    }
    let v = volume.clone();
    filled.free_after_fill = tokio::task::spawn_blocking(move || v.fill()).await.unwrap();
    filled.fills = 1;
    let full_since = Instant::now();
    let log = server.cluster.log_path();
    let (_, log_at_fill) = read_log(&log, 0);
    let mut free_at = match kind {
        Volume::Data => Some(pace.events + FULL_FOR),
        Volume::Wal => None,
    };
    loop {
        let now = progress.now();
        if free_at.is_none() && read_log(&log, log_at_fill).0.panics > 0 {
            free_at = Some(now.events + FULL_FOR);
        }
        if let (None, Some(c)) = (free_at, &wal_session) {
            // The segments recycled before the slot held them still have room, and on a
            // loaded machine the calls may not use it up within FULL_AT_MOST: a commit and a
            // segment switch per poll reach a segment that must be created, whatever the
            // calls' pace. Its error is the crash this run waits for.
            let _ = c
                .batch_execute("BEGIN; SELECT pg_current_xact_id(); COMMIT; SELECT pg_switch_wal()")
                .await;
        }
        let free_at = free_at.unwrap_or(usize::MAX);
        let s = server.clone();
        let down = tokio::task::spawn_blocking(move || !s.cluster.is_running())
            .await
            .unwrap();
        if now.ended || now.events >= free_at || down || full_since.elapsed() > FULL_AT_MOST {
            break;
        }
        // The disk stays full: what the server frees (a checkpoint removing old WAL) is
        // taken again, as by whatever filled it.
        if free_bytes(&volume.dir) > 0 {
            let v = volume.clone();
            tokio::task::spawn_blocking(move || v.fill()).await.unwrap();
            filled.refills += 1;
        }
        // The poll period of an operator's monitoring, not an ordering of sessions.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    filled.held = full_since.elapsed();
    volume.free();
    // The operator starts the server whenever it is down, and drops the slot that kept the
    // WAL, until the calls are over.
    let mut slot_dropped = kind != Volume::Wal;
    while !progress.now().ended || !slot_dropped {
        if !slot_dropped {
            slot_dropped = drop_slot(&server.dsn()).await;
        }
        let s = server.clone();
        let started = tokio::task::spawn_blocking(move || {
            let down = !s.cluster.is_running();
            if down {
                s.cluster.start_again();
            }
            down
        })
        .await
        .unwrap();
        filled.operator_starts += usize::from(started);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    filled
}

/// The replication slot nobody reads, on the WAL volume.
const SLOT: &str = "f10_abandoned";

/// Drops the abandoned slot, when the server is up: whether it is gone.
async fn drop_slot(dsn: &str) -> bool {
    let Ok(c) = ledger::connect(dsn).await else {
        return false;
    };
    c.batch_execute(&format!(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE slot_name = '{SLOT}'"
    ))
    .await
    .is_ok()
}

/// What the server's log says happened in a trial: lines from `from` on.
#[derive(Debug, Default, Clone, Copy)]
struct Logged {
    /// `ERROR` lines about a device with no space left (a statement failed).
    errors: usize,
    /// `PANIC` lines (a process that could not write WAL, say).
    panics: usize,
    /// Crash restarts: the postmaster ended every session and reinitialized.
    crash_restarts: usize,
    /// Startups that failed (crash recovery could not finish): the postmaster exited.
    failed_startups: usize,
}

fn read_log(path: &Path, from: usize) -> (Logged, usize) {
    let text = std::fs::read(path).unwrap_or_default();
    let tail = String::from_utf8_lossy(&text[from.min(text.len())..]).into_owned();
    let mut logged = Logged::default();
    for line in tail.lines() {
        let no_space = line.contains("No space left on device");
        logged.errors += usize::from(no_space && line.contains("ERROR:"));
        logged.panics += usize::from(line.contains("PANIC:"));
        logged.crash_restarts +=
            usize::from(line.contains("all server processes terminated; reinitializing"));
        logged.failed_startups += usize::from(line.contains("startup process failure"));
    }
    (logged, text.len())
}

/// How the server under test is set up for `volume` on `mount`.
fn start_server(volume: Volume, mount: &Path, db: &str) -> CrashServer {
    let location = mount.display().to_string();
    match volume {
        Volume::Data => {
            let create = format!("CREATE TABLESPACE f10_disk LOCATION '{location}'");
            CrashServer::start_with(
                "f10-data",
                db,
                &Setup {
                    before_database: &[&create],
                    database_options: "TABLESPACE f10_disk",
                    ..Setup::default()
                },
            )
        }
        Volume::Wal => CrashServer::start_with(
            "f10-wal",
            db,
            &Setup {
                // Small segments, few of them kept: a new one is needed soon after the fill.
                initdb_args: &["--waldir", &location, "--wal-segsize", "1"],
                conf: &["min_wal_size = '2MB'", "max_wal_size = '2MB'"],
                ..Setup::default()
            },
        ),
    }
}

struct Trial {
    run: Run,
    filled: Filled,
    logged: Logged,
    violations: Vec<Violation>,
}

async fn trial(
    volume: Volume,
    server: Arc<CrashServer>,
    mount: Arc<Tmpfs>,
    ledger_db: &str,
    n: u64,
    log_from: usize,
) -> (Trial, usize) {
    let name = ledger_db.to_string();
    let ledger_dsn = tokio::task::spawn_blocking(move || suite::fresh_database(&name))
        .await
        .unwrap();
    ledger::create(&ledger_dsn).await.unwrap();
    let w = run::Workload {
        processes: PROCESSES,
        keys: keys(volume),
        calls_per_process: calls(volume),
        scope: suite::scope("f10"),
        lease: LEASE.into(),
        ttl: "1 hour".into(),
        seed: 1000 + n,
    };
    let progress = Progress::default();
    let filling = tokio::spawn(disk(
        server.clone(),
        mount,
        volume,
        progress.clone(),
        10_000 + n,
    ));
    let run = run::run(
        &server.dsn(),
        &ledger_dsn,
        w,
        // Nothing expires in a run (ttl 1 hour): the monitor checks that no record seen
        // committed disappears, whatever the full disk does to the server.
        run::Options::default()
            .progress(progress)
            .monitor(run::Monitor::watching_for_vanished_records()),
    )
    .await
    .unwrap_or_else(|e| panic!("trial {n}: {e}"));
    let filled = filling.await.unwrap();
    let (logged, log_end) = read_log(&server.cluster.log_path(), log_from);
    let violations = check::check(&run);
    let t = Trial {
        run,
        filled,
        logged,
        violations,
    };
    (t, log_end)
}

/// Runs the trials of `volume`; the figures summed, for the test's own assertions.
async fn scenario(volume: Volume) -> Option<(Tally, Filled, Logged, usize)> {
    let tag = match volume {
        Volume::Data => "data",
        Volume::Wal => "wal",
    };
    let mount = match Tmpfs::mount(&format!("f10-{tag}")) {
        Ok(m) => Arc::new(m),
        Err(why) => {
            suite::skip(Skip::Missing, &why);
            return None;
        }
    };
    let db = format!("pgidem_faults_f10_{tag}");
    let ledger_db = format!("pgidem_faults_f10_{tag}_ledger");
    let at = mount.dir.clone();
    let d = db.clone();
    let server = tokio::task::spawn_blocking(move || start_server(volume, &at, &d))
        .await
        .unwrap();
    let server = Arc::new(server);
    let mut tally = Tally::new(&format!("F10 disk full ({tag})"));
    let mut sum = Filled::default();
    let mut logs = Logged::default();
    let mut refused = 0;
    let mut log_from = std::fs::metadata(server.cluster.log_path()).map_or(0, |m| m.len() as usize);
    let trials = match volume {
        Volume::Data => report::trials(4),
        Volume::Wal => report::trials(1),
    };
    for n in 0..trials {
        let started = Instant::now();
        let (t, log_end) = trial(
            volume,
            server.clone(),
            mount.clone(),
            &ledger_db,
            n as u64,
            log_from,
        )
        .await;
        log_from = log_end;
        let disk_full = t
            .run
            .events
            .iter()
            .filter(|e| matches!(&e.outcome, Outcome::Failed { sqlstate } if sqlstate == DISK_FULL))
            .count();
        let refused_completions = t
            .run
            .events
            .iter()
            .filter(|e| matches!(e.op, Op::Complete { .. }))
            .filter(|e| matches!(&e.outcome, Outcome::Failed { sqlstate } if sqlstate == DISK_FULL))
            .count();
        let other_failures: Vec<&str> = t
            .run
            .events
            .iter()
            .filter_map(|e| match &e.outcome {
                Outcome::Failed { sqlstate } if sqlstate != DISK_FULL && sqlstate != "ledger" => {
                    Some(sqlstate.as_str())
                }
                _ => None,
            })
            .collect();
        refused += disk_full;
        tally.add(&t.run, t.filled.fills, &t.violations);
        eprintln!(
            "{tag} trial {n}: {} operations, {} unknown, {disk_full} failed with 53100 \
             ({refused_completions} of them completions), \
             other failures {other_failures:?}, {:?}, {:?}, {:?}",
            t.run.events.len(),
            t.run.events.iter().filter(|e| e.is_indeterminate()).count(),
            t.filled,
            t.logged,
            started.elapsed()
        );
        assert!(
            t.violations.is_empty(),
            "{tag} trial {n}: {:#?}",
            t.violations
        );
        sum.fills += t.filled.fills;
        sum.free_after_fill = sum.free_after_fill.max(t.filled.free_after_fill);
        sum.refills += t.filled.refills;
        sum.operator_starts += t.filled.operator_starts;
        sum.held += t.filled.held;
        logs.errors += t.logged.errors;
        logs.panics += t.logged.panics;
        logs.crash_restarts += t.logged.crash_restarts;
        logs.failed_startups += t.logged.failed_startups;
    }
    tally
        .close(
            &server.dsn(),
            &format!("{sum:?}; {logs:?}; 53100 failures: {refused}"),
        )
        .await;
    // The disk was really full, every trial.
    assert_eq!(
        sum.fills, tally.trials,
        "a run ended before its fill: {sum:?}"
    );
    assert!(
        sum.free_after_fill < FULL_BELOW,
        "the volume was not full after the fill: {sum:?}"
    );
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&ledger_db);
        // The server stops before its volume is unmounted.
        drop(server);
        drop(mount);
    })
    .await
    .unwrap();
    Some((tally, sum, logs, refused))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_data_volume_fails_calls_with_53100() {
    let Some((tally, sum, logs, refused)) = scenario(Volume::Data).await else {
        return;
    };
    // Calls failed definitively because the tables could not grow, and the server stayed
    // up: no crash, nothing unknown to the clients.
    assert!(refused > 0, "no call failed with 53100: {logs:?}");
    assert!(
        logs.errors > 0,
        "the server logged no ENOSPC error: {logs:?}"
    );
    assert_eq!(logs.crash_restarts, 0, "the server crashed: {logs:?}");
    assert_eq!(sum.operator_starts, 0, "the server went down: {sum:?}");
    assert_eq!(tally.indeterminate, 0, "unknown outcomes: {tally:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_wal_volume_crashes_the_server_and_loses_nothing() {
    let Some((tally, sum, logs, _)) = scenario(Volume::Wal).await else {
        return;
    };
    // The server could not write its WAL: it crashed (PANIC, a crash restart), the clients
    // saw their connections break.
    assert!(logs.panics > 0, "no PANIC: {logs:?}");
    assert!(
        logs.crash_restarts + sum.operator_starts > 0,
        "the server neither restarted nor was started: {logs:?} {sum:?}"
    );
    assert!(tally.indeterminate > 0, "no outcome was unknown: {tally:?}");
}
