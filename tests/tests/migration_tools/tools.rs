//! The migration tools, each as its users lay out a project: where a migration file goes,
//! what wraps the plain SQL, and the command that applies what is pending. The layouts are
//! the ones docs/installation.md shows ("The portable variant in a migration tool").

use std::path::{Path, PathBuf};
use std::process::Command;

use pg_idempotency_tests::{root, Client};

/// One migration tool, installed by scripts/migration-tools.sh under target/.
pub trait Tool {
    fn name(&self) -> &'static str;
    /// Its program, or why it is not here.
    fn program(&self) -> Result<PathBuf, String>;
    /// Writes migration number `n` (1, 2, ...) with `sql` into the project at `dir`.
    fn write(&self, dir: &Path, n: usize, sql: &str);
    /// Applies every pending migration to database `db` at `port`: whether the tool
    /// succeeded, and what it printed.
    fn up(&self, dir: &Path, port: &str, db: &str) -> (bool, String);
    /// What the tool recorded as applied, in its own table.
    fn applied(&self, c: &mut Client) -> Vec<String>;
}

fn installed(path: PathBuf, how: &str) -> Result<PathBuf, String> {
    if path.exists() {
        Ok(path)
    } else {
        Err(format!("{} is not installed ({how})", path.display()))
    }
}

/// Runs the tool with its output in files, not pipes: Node writes to a file synchronously,
/// but may exit with a write to a pipe unfinished, and node-pg-migrate prints the whole
/// failed migration (hundreds of kB for an upgrade from 0.4.0) before its error.
fn run(cmd: &mut Command) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!(
        "pgidem-migration-tool-{}-{}",
        std::process::id(),
        OUTPUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let status = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let text = format!("{}{}", read(&out), read(&err));
    let _ = std::fs::remove_dir_all(&dir);
    (status.success(), text)
}

/// Each run's output files are its own, tests running side by side.
static OUTPUTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn rows(c: &mut Client, table: &str, column: &str) -> Vec<String> {
    let exists: bool = c
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .unwrap()
        .get(0);
    if !exists {
        return vec![];
    }
    c.query(
        &format!("SELECT {column}::text FROM {table} ORDER BY 1"),
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn node_bin(rel: &str) -> Result<PathBuf, String> {
    installed(
        root()
            .join("target/migration-tools/node/node_modules")
            .join(rel),
        "scripts/migration-tools.sh installs it with npm; node and npm are needed",
    )
}

/// dbmate (npm `@dbmate/linux-x64`): `db/migrations/<version>_<name>.sql`, the SQL after
/// `-- migrate:up`; each migration in its own transaction.
pub struct Dbmate;

impl Tool for Dbmate {
    fn name(&self) -> &'static str {
        "dbmate"
    }
    fn program(&self) -> Result<PathBuf, String> {
        node_bin("@dbmate/linux-x64/bin/dbmate")
    }
    fn write(&self, dir: &Path, n: usize, sql: &str) {
        let folder = dir.join("db/migrations");
        std::fs::create_dir_all(&folder).unwrap();
        let text = format!("-- migrate:up\n{sql}\n\n-- migrate:down\n");
        std::fs::write(folder.join(format!("2026120100000{n}_step_{n}.sql")), text).unwrap();
    }
    fn up(&self, dir: &Path, port: &str, db: &str) -> (bool, String) {
        run(Command::new(self.program().unwrap())
            .current_dir(dir)
            .arg("--url")
            .arg(format!(
                "postgres://postgres@127.0.0.1:{port}/{db}?sslmode=disable"
            ))
            .args(["--no-dump-schema", "up"]))
    }
    fn applied(&self, c: &mut Client) -> Vec<String> {
        rows(c, "public.schema_migrations", "version")
    }
}

/// node-pg-migrate: `migrations/<number>_<name>.sql`, the SQL after `-- Up Migration`; every
/// pending migration in one transaction (its default, --single-transaction).
pub struct NodePgMigrate;

impl Tool for NodePgMigrate {
    fn name(&self) -> &'static str {
        "node-pg-migrate"
    }
    fn program(&self) -> Result<PathBuf, String> {
        node_bin(".bin/node-pg-migrate")
    }
    fn write(&self, dir: &Path, n: usize, sql: &str) {
        let folder = dir.join("migrations");
        std::fs::create_dir_all(&folder).unwrap();
        let text = format!("-- Up Migration\n{sql}\n");
        std::fs::write(folder.join(format!("176457600000{n}_step_{n}.sql")), text).unwrap();
    }
    fn up(&self, dir: &Path, port: &str, db: &str) -> (bool, String) {
        run(Command::new(self.program().unwrap())
            .current_dir(dir)
            .env(
                "DATABASE_URL",
                format!("postgres://postgres@127.0.0.1:{port}/{db}"),
            )
            // Not verbose: its echo of every statement adds nothing a test reads.
            .args(["up", "-m", "migrations", "--no-verbose"]))
    }
    fn applied(&self, c: &mut Client) -> Vec<String> {
        rows(c, "public.pgmigrations", "name")
    }
}

/// Alembic (with SQLAlchemy and psycopg 3): `alembic/versions/<rev>.py`, whose upgrade()
/// sends the `.sql` file beside it as one query through the DBAPI cursor (SQLAlchemy's
/// `op.execute` and even `exec_driver_sql` read its `:name` and `%` as parameters: psycopg
/// refuses "incomplete placeholder"); every pending migration in one transaction (its
/// default on PostgreSQL).
pub struct Alembic;

const ALEMBIC_ENV: &str = r#"import os

from alembic import context
from sqlalchemy import create_engine

engine = create_engine(os.environ["DATABASE_URL"])
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=None)
    with context.begin_transaction():
        context.run_migrations()
"#;

impl Tool for Alembic {
    fn name(&self) -> &'static str {
        "alembic"
    }
    fn program(&self) -> Result<PathBuf, String> {
        installed(
            root().join("target/migration-tools/python-venv/bin/alembic"),
            "scripts/migration-tools.sh installs it with pip; python3 with its venv module is needed",
        )
    }
    fn write(&self, dir: &Path, n: usize, sql: &str) {
        let versions = dir.join("alembic/versions");
        std::fs::create_dir_all(&versions).unwrap();
        std::fs::write(
            dir.join("alembic.ini"),
            "[alembic]\nscript_location = %(here)s/alembic\n",
        )
        .unwrap();
        std::fs::write(dir.join("alembic/env.py"), ALEMBIC_ENV).unwrap();
        std::fs::write(versions.join(format!("step_{n}.sql")), sql).unwrap();
        let down = if n == 1 {
            "None".to_string()
        } else {
            format!("\"{:04}\"", n - 1)
        };
        let py = format!(
            "from pathlib import Path\n\nfrom alembic import op\n\nrevision = \"{n:04}\"\ndown_revision = {down}\n\n\n\
             def upgrade():\n    sql = (Path(__file__).parent / \"step_{n}.sql\").read_text()\n    \
             # The DBAPI cursor sends the file as it is, in Alembic's transaction.\n    \
             op.get_bind().connection.cursor().execute(sql)\n"
        );
        std::fs::write(versions.join(format!("{n:04}_step_{n}.py")), py).unwrap();
    }
    fn up(&self, dir: &Path, port: &str, db: &str) -> (bool, String) {
        run(Command::new(self.program().unwrap())
            .current_dir(dir)
            .env(
                "DATABASE_URL",
                format!("postgresql+psycopg://postgres@127.0.0.1:{port}/{db}"),
            )
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-c", "alembic.ini", "upgrade", "head"]))
    }
    fn applied(&self, c: &mut Client) -> Vec<String> {
        rows(c, "public.alembic_version", "version_num")
    }
}
