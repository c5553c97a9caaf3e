//! A server under test with a streaming standby, for failover: two throwaway servers of the
//! same version (pg_idempotency_tests::TempCluster), one the primary, the other a standby
//! made from it with `pg_basebackup -R`. A failover stops the primary immediately and
//! promotes the standby; the next trial makes the stopped server again as the new
//! primary's standby (as an operator re-seeds a failed primary), so the two swap roles.
//!
//! Clients reach "whichever is the primary" the way libpq users do: both servers in one
//! connection string with `target_session_attrs=read-write` ([`ReplicatedServer::dsn`]).
//! The standby is refused as read-only until it is promoted; no proxy or DNS to switch.
//!
//! Every method blocks (pg_ctl, pg_basebackup, polling): call it from `spawn_blocking`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pg_idempotency_tests::{self as suite, Backend, TempCluster};

use crate::crash_server::{CrashServer, PURGE_WORKER};
use crate::run::APPLICATION;

/// The standby's `application_name`, the name `synchronous_standby_names` lists.
pub const STANDBY: &str = "pgidem_standby";

/// How the primary waits for the standby when a transaction commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = ''`: a commit is acknowledged once flushed locally;
    /// the standby follows when it can.
    Asynchronous,
    /// The standby is named in `synchronous_standby_names` and `synchronous_commit = on`:
    /// a commit is acknowledged once the standby flushed it.
    Synchronous,
    /// The same with `synchronous_commit = remote_apply`: once the standby applied it.
    RemoteApply,
    /// Synchronous as above, but the client sessions connect with
    /// `options='-c synchronous_commit=local'` (what a user's session may set): the product
    /// must still wait for the standby when it commits a claim or a completion.
    SyncSessionsLocal,
}

impl Replication {
    /// The mode as the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Replication::Asynchronous => "async",
            Replication::Synchronous => "sync",
            Replication::RemoteApply => "remote_apply",
            Replication::SyncSessionsLocal => "sync, sessions local",
        }
    }

    fn standby_names(self) -> &'static str {
        match self {
            Replication::Asynchronous => "",
            _ => STANDBY,
        }
    }

    /// The `synchronous_commit` the primary is configured with (`ALTER SYSTEM`).
    pub fn commit(self) -> &'static str {
        match self {
            Replication::RemoteApply => "remote_apply",
            _ => "on",
        }
    }

    /// What the client sessions add to the connection string.
    fn session_options(self) -> &'static str {
        match self {
            Replication::SyncSessionsLocal => " options='-c synchronous_commit=local'",
            _ => "",
        }
    }

    /// The `synchronous_commit` the client sessions have (their own setting, which the
    /// product raises for its commits where it is weaker than `on`).
    pub fn session_commit(self) -> &'static str {
        match self {
            Replication::SyncSessionsLocal => "local",
            other => other.commit(),
        }
    }

    /// `pg_stat_replication.sync_state` of the standby in this mode.
    fn sync_state(self) -> &'static str {
        match self {
            Replication::Asynchronous => "async",
            _ => "sync",
        }
    }
}

/// When a failover happened.
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    /// The primary had stopped (every acknowledgement it gave was given before).
    pub stopped: Instant,
    /// The standby accepted writes.
    pub promoted: Instant,
}

pub struct ReplicatedServer {
    nodes: [TempCluster; 2],
    /// Which of `nodes` is the primary.
    primary: AtomicUsize,
    /// The other one runs as a standby of it (false after a failover until it is re-seeded).
    standby_running: AtomicBool,
    /// The database the backend under test is installed in.
    pub db: String,
}

fn admin(c: &TempCluster) -> suite::Client {
    suite::connect_to(&c.dsn("postgres"))
}

/// Runs `ALTER SYSTEM` statements (each on its own: they refuse a transaction block), then
/// asks the server to reload its settings.
fn settings(c: &mut suite::Client, statements: &[&str]) {
    for s in statements.iter().chain(&["SELECT pg_reload_conf()"]) {
        c.batch_execute(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}

impl ReplicatedServer {
    /// A primary named `name` with the backend under test installed in `db` (and, for the
    /// extension, preloaded with its purge worker on `db`), and its standby.
    pub fn start(name: &str, db: &str) -> ReplicatedServer {
        let CrashServer { cluster, db } = CrashServer::start(&format!("{name}-a"), db);
        let standby = TempCluster::standby_of(&cluster, &format!("{name}-b"), STANDBY);
        ReplicatedServer {
            nodes: [cluster, standby],
            primary: AtomicUsize::new(0),
            standby_running: AtomicBool::new(true),
            db,
        }
    }

    pub fn primary(&self) -> &TempCluster {
        &self.nodes[self.primary.load(Ordering::SeqCst)]
    }

    pub fn standby(&self) -> &TempCluster {
        &self.nodes[1 - self.primary.load(Ordering::SeqCst)]
    }

    /// The clients' connection string: both servers, the primary first, and
    /// `target_session_attrs=read-write`, so that after a failover a new connection
    /// reaches the promoted standby (and never a server still in recovery).
    pub fn dsn(&self) -> String {
        let (p, s) = (self.primary(), self.standby());
        format!(
            "host={},{} port={},{} user=postgres dbname={} target_session_attrs=read-write",
            p.socket_dir().display(),
            s.socket_dir().display(),
            p.port(),
            s.port(),
            self.db
        )
    }

    /// The clients' connection string ([`ReplicatedServer::dsn`]) with the session
    /// settings of `mode`.
    pub fn session_dsn(&self, mode: Replication) -> String {
        format!("{}{}", self.dsn(), mode.session_options())
    }

    /// How many client sessions (`run::APPLICATION`) on the primary wait for the standby
    /// to confirm their commit (`wait_event = 'SyncRep'`).
    pub fn sessions_waiting_for_standby(&self) -> i64 {
        admin(self.primary())
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE application_name = $1 AND wait_event = 'SyncRep'",
                &[&APPLICATION],
            )
            .unwrap()
            .get(0)
    }

    /// Makes the pair ready for a trial in `mode`: the standby (re-seeded from the primary
    /// after a failover) streaming, and the primary committing as the mode says, checked
    /// on the servers themselves.
    pub fn prepare(&self, mode: Replication) {
        let mut p = admin(self.primary());
        // ClientSettings of an earlier trial go (ALTER SYSTEM is not replicated, but a re-seed
        // copies postgresql.auto.conf: a new standby must not inherit them).
        settings(&mut p, &["ALTER SYSTEM RESET ALL"]);
        if !self.standby_running.load(Ordering::SeqCst) {
            self.standby().reseed_from(self.primary(), STANDBY);
            self.standby_running.store(true, Ordering::SeqCst);
        }
        let streaming = "SELECT sync_state FROM pg_stat_replication \
                         WHERE application_name = $1 AND state = 'streaming'";
        suite::wait_until(
            "the standby streams from the primary",
            Duration::from_secs(30),
            || !p.query(streaming, &[&STANDBY]).unwrap().is_empty(),
        );
        settings(
            &mut p,
            &[
                &format!(
                    "ALTER SYSTEM SET synchronous_standby_names = '{}'",
                    mode.standby_names()
                ),
                &format!("ALTER SYSTEM SET synchronous_commit = '{}'", mode.commit()),
            ],
        );
        // A reload reaches every process a little later: wait until the standby is
        // reported in the mode's state and a new session commits as the mode says.
        suite::wait_until(
            &format!("the standby is {}", mode.sync_state()),
            Duration::from_secs(30),
            || {
                let state: Option<String> = p
                    .query_opt(streaming, &[&STANDBY])
                    .unwrap()
                    .map(|r| r.get(0));
                let commit: String = admin(self.primary())
                    .query_one("SHOW synchronous_commit", &[])
                    .unwrap()
                    .get(0);
                state.as_deref() == Some(mode.sync_state()) && commit == mode.commit()
            },
        );
    }

    /// Cuts the standby off the primary (a partition of the replication link): its
    /// `primary_conninfo` emptied and reloaded, the WAL receiver gone. What the primary
    /// commits from now on never reaches the standby.
    pub fn cut_replication(&self) {
        let mut s = admin(self.standby());
        settings(&mut s, &["ALTER SYSTEM SET primary_conninfo = ''"]);
        suite::wait_until(
            "the standby's WAL receiver stops",
            Duration::from_secs(30),
            || {
                s.query_one("SELECT count(*) FROM pg_stat_wal_receiver", &[])
                    .unwrap()
                    .get::<_, i64>(0)
                    == 0
            },
        );
    }

    /// The failover: the primary stopped immediately (as a crash would), the standby
    /// promoted; the standby is the primary from now on.
    pub fn fail_over(&self) -> Failover {
        assert!(
            self.standby_running.load(Ordering::SeqCst),
            "no standby to fail over to"
        );
        let (old, new) = (self.primary(), self.standby());
        assert!(old.postmaster_pid().is_some(), "the primary is not running");
        old.stop_immediate();
        let stopped = Instant::now();
        assert_eq!(old.postmaster_pid(), None, "the primary still runs");
        new.promote();
        let promoted = Instant::now();
        self.primary.fetch_xor(1, Ordering::SeqCst);
        self.standby_running.store(false, Ordering::SeqCst);
        Failover { stopped, promoted }
    }

    /// With the extension, waits until the purge worker runs on the primary (on a promoted
    /// standby it starts once recovery has finished); panics after half a minute.
    pub fn purge_worker_runs(&self) {
        if suite::backend() != Backend::Extension {
            return;
        }
        let mut p = admin(self.primary());
        suite::wait_until(
            "the purge worker runs on the primary",
            Duration::from_secs(30),
            || {
                p.query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = $1",
                    &[&PURGE_WORKER],
                )
                .unwrap()
                .get::<_, i64>(0)
                    == 1
            },
        );
    }

    /// Whether the server the clients reach is out of recovery (a primary).
    pub fn primary_is_writable(&self) -> bool {
        !admin(self.primary())
            .query_one("SELECT pg_is_in_recovery()", &[])
            .unwrap()
            .get::<_, bool>(0)
    }
}
