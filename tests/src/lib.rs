//! Helpers for the behaviour suite: connections to the server under test and thin wrappers
//! over the SQL API. The suite runs against any server where pg_idempotency is installed;
//! `scripts/test.sh` points it at each private cluster in turn.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use postgres::{Client, NoTls};

pub mod attack;
pub mod backends;
pub mod catalogue;
mod lapse;
mod poll;
pub mod sharded;
mod skip;
mod temp_cluster;
pub use lapse::{wait_for_expiry, wait_for_lapse};
pub use poll::{eventually, eventually_async, until, until_async, wait_until, Deadline, PATIENCE};
pub use skip::{skip, skip_through_pooler, skip_through_proxy, Skip};
pub use temp_cluster::TempCluster;

/// Connection string of the database under test: `PGIDEM_DSN`, or by default the private
/// PostgreSQL 18 cluster's `pgidem_it` database, on the port it took.
pub fn dsn() -> String {
    std::env::var("PGIDEM_DSN").unwrap_or_else(|_| {
        let root = env!("CARGO_MANIFEST_DIR").trim_end_matches("/tests");
        // The port of the cluster's last start, which scripts/cluster.sh remembers (54818
        // unless another program held it or PG18_PORT said otherwise).
        let port = std::fs::read_to_string(format!("{root}/target/clusters/pg18/port"))
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok())
            .unwrap_or(54818);
        format!(
            "host={root}/target/clusters/pg18/socket port={port} user=postgres dbname=pgidem_it"
        )
    })
}

pub fn connect() -> Client {
    connect_to(&dsn())
}

pub fn connect_to(dsn: &str) -> Client {
    Client::connect(dsn, NoTls).unwrap_or_else(|e| {
        panic!("cannot connect to {dsn}: {e}\nStart it with scripts/test.sh (or scripts/cluster.sh pg18 start).")
    })
}

/// The same connection string with another database.
pub fn with_db(dsn: &str, db: &str) -> String {
    let rest: Vec<&str> = dsn
        .split_whitespace()
        .filter(|p| !p.starts_with("dbname="))
        .collect();
    format!("{} dbname={db}", rest.join(" "))
}

/// Creates `db` on the server under test if it does not exist.
pub fn ensure_database(db: &str) {
    let mut admin = connect_to(&with_db(&dsn(), "postgres"));
    let exists: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)",
            &[&db],
        )
        .map(|r| r.get(0))
        .unwrap_or(false);
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE {db}"))
            .unwrap();
    }
}

/// Drops `db` on the server under test if it exists (closing its sessions).
pub fn drop_database(db: &str) {
    connect_to(&with_db(&dsn(), "postgres"))
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .unwrap_or_else(|e| panic!("DROP DATABASE {db}: {e}"));
}

/// A new, empty `db` on the server under test (dropped first if it exists); its DSN.
pub fn fresh_database(db: &str) -> String {
    drop_database(db);
    connect_to(&with_db(&dsn(), "postgres"))
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {db}: {e}"));
    with_db(&dsn(), db)
}

/// A scope no other test (or earlier run) uses, so tests can share one database.
pub fn scope(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{name}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The SQLSTATE of a failed statement.
pub fn sqlstate(err: &postgres::Error) -> String {
    err.code()
        .map(|c| c.code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {err}"))
}

/// What `idem_begin` answered.
#[derive(Debug, Clone)]
pub struct Begin {
    pub outcome: String,
    pub fence: Option<i64>,
    pub attempt: i32,
    pub recovered: bool,
    pub upstream_key: String,
    pub succeeded: Option<bool>,
    pub response: Option<String>,
}

const BEGIN: &str =
    "SELECT outcome, fence, attempt, recovered, upstream_key::text, succeeded, response::text \
                     FROM idem_begin(scope => $1, key => $2, request => $3::text::jsonb, \
                                     lease => $4::text::interval, wait => $5::text::interval)";

/// `idem_begin` with the arguments the suite varies.
pub fn try_begin(
    c: &mut Client,
    scope: &str,
    key: &str,
    request: Option<&str>,
    lease: Option<&str>,
    wait: Option<&str>,
) -> Result<Begin, postgres::Error> {
    let row = c.query_one(
        BEGIN,
        &[&scope, &key, &request, &lease, &wait.unwrap_or("0")],
    )?;
    Ok(Begin {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        recovered: row.get(3),
        upstream_key: row.get(4),
        succeeded: row.get(5),
        response: row.get(6),
    })
}

pub fn begin(c: &mut Client, scope: &str, key: &str) -> Begin {
    try_begin(c, scope, key, None, None, None).unwrap_or_else(|e| panic!("idem_begin: {e}"))
}

pub fn complete(
    c: &mut Client,
    scope: &str,
    key: &str,
    fence: i64,
    response: &str,
) -> Result<String, postgres::Error> {
    let row = c.query_one(
        "SELECT state FROM idem_complete($1, $2, $3, $4::text::jsonb)",
        &[&scope, &key, &fence, &response],
    )?;
    Ok(row.get(0))
}

/// The server's major version, e.g. 15 or 18.
pub fn server_major(c: &mut Client) -> i32 {
    let v: String = c
        .query_one("SHOW server_version_num", &[])
        .map(|r| r.get(0))
        .unwrap_or_default();
    v.parse::<i32>().unwrap_or(0) / 10000
}

/// Which implementation of the SQL API the suite runs against (`PGIDEM_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `CREATE EXTENSION pg_idempotency`.
    Extension,
    /// The portable SQL variant, `sql/pg_idempotency.sql`.
    Portable,
}

/// The backend under test: `PGIDEM_BACKEND` = `extension` (the default) or `portable`.
pub fn backend() -> Backend {
    match std::env::var("PGIDEM_BACKEND").as_deref() {
        Ok("portable") => Backend::Portable,
        Ok("extension") | Err(_) => Backend::Extension,
        Ok(other) => panic!("PGIDEM_BACKEND is '{other}': extension or portable"),
    }
}

/// The folder of the server's own client programs (psql, pg_dump: they must match it).
pub fn bindir() -> String {
    std::env::var("PGIDEM_BINDIR")
        .expect("PGIDEM_BINDIR names the server's bin folder (scripts/test.sh sets it)")
}

/// The repository's root folder.
pub fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default()
}

/// Runs a file of the portable variant (sql/) with psql, as its docs say: in one
/// transaction, stopping at the first error, with `vars` as psql variables. Returns
/// whether it succeeded, and what psql printed.
pub fn run_sql_file(
    dsn: &str,
    file: &str,
    vars: &[(&str, &str)],
    env: &[(&str, &str)],
) -> (bool, String) {
    let mut args: Vec<String> = ["-q", "--single-transaction", "-v", "ON_ERROR_STOP=1"]
        .map(String::from)
        .to_vec();
    for (name, value) in vars {
        args.push("-v".into());
        args.push(format!("{name}={value}"));
    }
    args.push("-f".into());
    args.push(sql_file(file));
    run_psql(dsn, &args, env)
}

/// The path of a file of the portable variant (sql/).
pub fn sql_file(file: &str) -> String {
    root().join("sql").join(file).to_string_lossy().into_owned()
}

/// Runs psql (no psqlrc) with `args` on `dsn`: whether it exited 0, and what it printed.
pub fn run_psql(dsn: &str, args: &[String], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = std::process::Command::new(format!("{}/psql", bindir()));
    cmd.arg("-X").args(args).arg(dsn);
    cmd.envs(env.iter().copied());
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Installs the backend under test into the (empty) database of `dsn`.
pub fn install(dsn: &str) {
    install_backend(dsn, backend())
}

/// Installs `backend` into the (empty) database of `dsn`, whichever the suite runs against.
pub fn install_backend(dsn: &str, backend: Backend) {
    match backend {
        Backend::Extension => connect_to(dsn)
            .batch_execute("CREATE EXTENSION pg_idempotency")
            .unwrap_or_else(|e| panic!("CREATE EXTENSION: {e}")),
        Backend::Portable => {
            let (ok, out) = run_sql_file(dsn, "pg_idempotency.sql", &[], &[]);
            assert!(ok, "portable install failed:\n{out}");
        }
    }
}

/// Applies the portable upgrade scripts (sql/upgrade/) in order, from the installed version
/// to the current one.
fn upgrade_portable(dsn: &str, c: &mut Client) {
    let mut version: String = c
        .query_one("SELECT version FROM idempotency.installed", &[])
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("the portable install's version: {e}"));
    while version != env!("CARGO_PKG_VERSION") {
        let prefix = format!("pg_idempotency--{version}--");
        let next = std::fs::read_dir(root().join("sql/upgrade"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find_map(|f| Some(f.strip_prefix(&prefix)?.strip_suffix(".sql")?.to_string()))
            .unwrap_or_else(|| panic!("no portable upgrade from {version}"));
        let file = sql_file(&format!("upgrade/{prefix}{next}.sql"));
        let (ok, out) = run_psql(dsn, &["-f".to_string(), file], &[]);
        assert!(ok, "portable upgrade from {version} failed:\n{out}");
        version = next;
    }
}

/// Removes whichever backend the database of `dsn` has, then installs the one under test.
pub fn reinstall(dsn: &str) {
    let mut c = connect_to(dsn);
    let portable: bool = c
        .query_one(
            "SELECT to_regclass('idempotency.installed') IS NOT NULL",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or(false);
    if portable {
        // A database kept between runs may hold an older release: the uninstall serves the
        // current version only, so it is upgraded first, as a user would.
        upgrade_portable(dsn, &mut c);
        let (ok, out) = run_sql_file(dsn, "uninstall.sql", &[], &[]);
        assert!(ok, "portable uninstall failed:\n{out}");
    }
    c.batch_execute("DROP EXTENSION IF EXISTS pg_idempotency")
        .unwrap();
    drop(c);
    install(dsn);
}
