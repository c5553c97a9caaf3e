//! A server under test that a scenario may crash: a throwaway server of the same version
//! (pg_idempotency_tests::TempCluster), so that a crash never touches the shared server
//! where the ledger lives. The backend under test is installed in a database of its own;
//! with the extension, the library is preloaded and the purge worker purges that database.

use std::time::{Duration, Instant};

use pg_idempotency_tests::{self as suite, Backend, TempCluster};
use tokio_postgres::Client;

use crate::ledger;

/// The `backend_type` (and application_name) of the extension's purge worker.
pub const PURGE_WORKER: &str = "pg_idempotency purger";

/// How a [`CrashServer`] is set up beyond the usual; every part empty by default.
#[derive(Debug, Default, Clone, Copy)]
pub struct Setup<'a> {
    /// Environment variables the server is started with (see
    /// [`TempCluster::start_with_env`]).
    pub env: &'a [(&'a str, &'a str)],
    /// More arguments to initdb (e.g. `--waldir`, `--wal-segsize`).
    pub initdb_args: &'a [&'a str],
    /// More lines of postgresql.conf.
    pub conf: &'a [&'a str],
    /// Statements run in database postgres before the database under test is created
    /// (e.g. `CREATE TABLESPACE`).
    pub before_database: &'a [&'a str],
    /// Appended to its `CREATE DATABASE` (e.g. `TABLESPACE ...`).
    pub database_options: &'a str,
}

pub struct CrashServer {
    pub cluster: TempCluster,
    /// The database the backend under test is installed in.
    pub db: String,
}

impl CrashServer {
    /// A new server named `name` with the backend under test installed in database `db`.
    /// Blocking (initdb, pg_ctl, psql): call it from `spawn_blocking`.
    pub fn start(name: &str, db: &str) -> CrashServer {
        CrashServer::start_with_env(name, db, &[])
    }

    /// [`CrashServer::start`], the server started with these environment variables (see
    /// [`TempCluster::start_with_env`]).
    pub fn start_with_env(name: &str, db: &str, env: &[(&str, &str)]) -> CrashServer {
        CrashServer::start_with(
            name,
            db,
            &Setup {
                env,
                ..Setup::default()
            },
        )
    }

    /// [`CrashServer::start`], the server set up as `setup` says.
    pub fn start_with(name: &str, db: &str, setup: &Setup) -> CrashServer {
        let worker_db = format!("pg_idempotency.database = '{db}'");
        let mut conf: Vec<&str> = match suite::backend() {
            Backend::Extension => vec![
                "shared_preload_libraries = 'pg_idempotency'",
                "pg_idempotency.purge_interval = 1",
                &worker_db,
            ],
            // The portable variant runs where no library can be installed: nothing to load.
            Backend::Portable => vec![],
        };
        conf.extend(setup.conf.iter().copied());
        let cluster = TempCluster::start_with_initdb(name, &conf, setup.env, setup.initdb_args);
        let mut admin = suite::connect_to(&cluster.dsn("postgres"));
        for sql in setup.before_database {
            admin
                .batch_execute(sql)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        admin
            .batch_execute(&format!("CREATE DATABASE {db} {}", setup.database_options))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {db}: {e}"));
        let server = CrashServer {
            cluster,
            db: db.to_string(),
        };
        suite::install(&server.dsn());
        if suite::backend() == Backend::Extension {
            // The worker's database is read when the server starts; it did not exist then.
            server.cluster.restart();
        }
        server
    }

    /// The DSN of the database under test.
    pub fn dsn(&self) -> String {
        self.cluster.dsn(&self.db)
    }

    /// Sends SIGKILL to process `pid` of the server (the server runs as another OS user
    /// when we are root: root may signal it). Whether the signal was delivered.
    pub fn kill9(&self, pid: i32) -> bool {
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

/// Connects to `dsn`, retrying while the server restarts, for at most a minute.
pub async fn connect_when_up(dsn: &str) -> Client {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match ledger::connect(dsn).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > until => panic!("{dsn} is not up for a minute: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// After a process of the server was killed: waits until the postmaster has ended every
/// session (`c`, a session opened before the kill, breaks), then until the server accepts
/// connections again after crash recovery; a new session. Panics when `c` is still served
/// after half a minute: the server did not restart.
pub async fn through_crash_recovery(c: Client, dsn: &str) -> Client {
    let until = Instant::now() + Duration::from_secs(30);
    while c.simple_query("SELECT 1").await.is_ok() {
        assert!(
            Instant::now() < until,
            "the server still serves a session opened before the kill: no crash restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    connect_when_up(dsn).await
}

/// The server's major version, e.g. "18".
pub async fn major_version(c: &Client) -> String {
    let v: String = c
        .query_one("SHOW server_version_num", &[])
        .await
        .unwrap_or_else(|e| panic!("SHOW server_version_num: {e}"))
        .get(0);
    (v.parse::<i32>().unwrap_or(0) / 10000).to_string()
}

/// The backend under test as the report names it.
pub fn backend_name() -> &'static str {
    match suite::backend() {
        Backend::Extension => "extension",
        Backend::Portable => "portable",
    }
}
