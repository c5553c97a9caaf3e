//! A proxy database with the PL/Proxy layer (sql/proxy/) in front of partition databases
//! that each run the backend under test: the fixture of the sharding suite
//! (tests/tests/sharding/). Everything it makes is named for the test and the process and
//! dropped with it.

use sha2::{Digest, Sha256};

use crate::{
    backend, connect_to, drop_database, dsn, fresh_database, install_backend, root, run_psql,
    server_major, skip, with_db, Client, Skip,
};

pub struct Sharded {
    /// The proxy database: the SQL API, served by the partitions.
    pub proxy: String,
    /// Each partition's DSN (as a superuser), in partition order.
    pub partitions: Vec<String>,
    /// The databases on the server under test this fixture made, dropped with it.
    made: Vec<String>,
    test: String,
}

/// Whether PL/Proxy can be created on the server under test; when not, records the skip
/// and its reason.
pub fn plproxy_available() -> bool {
    let mut c = connect_to(&with_db(&dsn(), "postgres"));
    let available: bool = c
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'plproxy')",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or(false);
    if !available {
        if server_major(&mut c) == 15 {
            skip(
                Skip::Missing,
                "PL/Proxy is not installed (Debian's postgresql-15-plproxy: scripts/setup.sh installs it as root)",
            );
        } else {
            skip(
                Skip::NotApplicable,
                "PL/Proxy is packaged here for PostgreSQL 15 only (Debian's postgresql-15-plproxy): \
                 the suite runs through a proxy on PostgreSQL 15",
            );
        }
    }
    available
}

/// The libpq connection string PL/Proxy is given for a partition: the DSN without its
/// user, so that PL/Proxy connects as the calling role.
pub fn partition_conninfo(dsn: &str) -> String {
    dsn.split_whitespace()
        .filter(|p| !p.starts_with("user="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The routing hash the layer documents (docs/scaling.md): the first four bytes of
/// SHA-256(scope, NUL, key), big-endian, as a signed 32-bit integer.
pub fn routing_hash(scope: &str, key: &str) -> i32 {
    let mut h = Sha256::new();
    h.update(scope.as_bytes());
    h.update([0u8]);
    h.update(key.as_bytes());
    let d = h.finalize();
    i32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// The partition of `partitions` (a power of two) that holds (scope, key): PL/Proxy takes
/// the hash's low bits.
pub fn partition_of(scope: &str, key: &str, partitions: usize) -> usize {
    (routing_hash(scope, key) as u32 as usize) & (partitions - 1)
}

impl Sharded {
    /// A proxy in front of `n` new partition databases on the server under test. None (the
    /// test recorded as skipped) where PL/Proxy is not installed.
    pub fn new(test: &str, n: usize) -> Option<Sharded> {
        if !plproxy_available() {
            return None;
        }
        let mut made = Vec::new();
        let mut partitions = Vec::new();
        for p in 0..n {
            let db = format!("pgidem_{test}_p{p}_{}", std::process::id());
            let dsn = fresh_database(&db);
            install_backend(&dsn, backend());
            made.push(db);
            partitions.push(dsn);
        }
        Some(Sharded::in_front_of(test, partitions, made))
    }

    /// A proxy on the server under test in front of these partitions (databases with the
    /// backend installed, anywhere); `made`: databases of the server under test to drop
    /// with it.
    pub fn in_front_of(test: &str, partitions: Vec<String>, mut made: Vec<String>) -> Sharded {
        let db = format!("pgidem_{test}_proxy_{}", std::process::id());
        let proxy = fresh_database(&db);
        made.insert(0, db);
        install_layer(&proxy);
        let sharded = Sharded {
            proxy,
            partitions,
            made,
            test: test.to_string(),
        };
        sharded.configure();
        sharded
    }

    /// `n` more partition databases with the backend under test, not yet known to the
    /// proxy (for scripts/reshard.sh); their DSNs.
    pub fn new_partitions(&mut self, n: usize) -> Vec<String> {
        let from = self.partitions.len();
        (from..from + n)
            .map(|p| {
                let db = format!("pgidem_{}_p{p}_{}", self.test, std::process::id());
                let dsn = fresh_database(&db);
                install_backend(&dsn, backend());
                self.made.push(db);
                dsn
            })
            .collect()
    }

    /// scripts/reshard.sh from the partitions now to these plus `new`; whether it
    /// succeeded, and what it printed. The partitions are then all of them.
    pub fn reshard(&mut self, new: Vec<String>) -> (bool, String) {
        self.reshard_from(self.partitions.clone(), new)
    }

    /// A copy of the partitions' DSNs.
    pub fn clone_partitions(&self) -> Vec<String> {
        self.partitions.clone()
    }

    /// scripts/reshard.sh given `old` as the current partitions (the test of a wrong list).
    pub fn reshard_from(&mut self, old: Vec<String>, new: Vec<String>) -> (bool, String) {
        let mut all = old;
        all.extend(new);
        let mut cmd = std::process::Command::new(root().join("scripts/reshard.sh"));
        cmd.arg(partition_conninfo(&self.proxy))
            .args(all.iter().map(|d| partition_conninfo(d)))
            .env("PSQL", format!("{}/psql", crate::bindir()))
            .env("PGUSER", "postgres");
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("scripts/reshard.sh: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            self.partitions = all;
        }
        (out.status.success(), text)
    }

    /// `idem_proxy_configure` with the partitions as they are now.
    pub fn configure(&self) {
        let conninfo: Vec<String> = self
            .partitions
            .iter()
            .map(|d| partition_conninfo(d))
            .collect();
        self.connect()
            .query("SELECT * FROM idem_proxy_configure($1)", &[&conninfo])
            .unwrap_or_else(|e| panic!("idem_proxy_configure: {e}"));
    }

    /// A session on the proxy, as the suite's superuser.
    pub fn connect(&self) -> Client {
        connect_to(&self.proxy)
    }

    /// A session on the proxy as `role`.
    pub fn connect_as(&self, role: &str) -> Client {
        let dsn: Vec<&str> = self
            .proxy
            .split_whitespace()
            .filter(|p| !p.starts_with("user="))
            .collect();
        connect_to(&format!("{} user={role}", dsn.join(" ")))
    }

    /// A superuser session on partition `p`, to see its storage.
    pub fn partition(&self, p: usize) -> Client {
        connect_to(&self.partitions[p])
    }

    /// How many rows of (scope, key) partition `p` stores, live or expired, any owner.
    pub fn rows_on(&self, p: usize, scope: &str, key: &str) -> i64 {
        self.partition(p)
            .query_one(
                "SELECT count(*) FROM idempotency.records WHERE scope = $1 AND key = $2",
                &[&scope, &key],
            )
            .map(|r| r.get(0))
            .unwrap_or_else(|e| panic!("partition {p}'s records: {e}"))
    }

    /// Which partitions store (scope, key).
    pub fn holders(&self, scope: &str, key: &str) -> Vec<usize> {
        (0..self.partitions.len())
            .filter(|&p| self.rows_on(p, scope, key) > 0)
            .collect()
    }

    /// The partition the documented hash names for (scope, key).
    pub fn partition_of(&self, scope: &str, key: &str) -> usize {
        partition_of(scope, key, self.partitions.len())
    }
}

/// Installs the PL/Proxy layer into the (empty) database of `dsn`, as docs/scaling.md
/// says: in one transaction, stopping at the first error.
pub fn install_layer(dsn: &str) {
    let file = root().join("sql/proxy/pg_idempotency_proxy.sql");
    let args = [
        "-q",
        "--single-transaction",
        "-v",
        "ON_ERROR_STOP=1",
        "-f",
        &file.to_string_lossy(),
    ]
    .map(String::from);
    let (ok, out) = run_psql(dsn, &args, &[]);
    assert!(ok, "the PL/Proxy layer did not install:\n{out}");
}

impl Drop for Sharded {
    fn drop(&mut self) {
        // The proxy first: its sessions hold connections to the partitions. Best effort: a
        // failed test's databases are dropped by the next run of the same test.
        for db in &self.made {
            let _ = std::panic::catch_unwind(|| drop_database(db));
        }
    }
}
