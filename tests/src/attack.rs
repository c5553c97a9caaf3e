//! What the attack tests share: a database made for one test, roles made for one test, a
//! canary table that only attacker code writes, and a picture of the storage to show that
//! an attack changed nothing.

use postgres::Client;

/// A database of its own for one test, with the backend under test installed; dropped when
/// this is, whether the test passed or failed.
pub struct Db {
    pub name: String,
    pub dsn: String,
}

impl Db {
    /// A fresh `pidem_atk2_<test>_<backend>` (dropped first if an earlier run left it).
    pub fn fresh(test: &str) -> Db {
        let tag = match crate::backend() {
            crate::Backend::Extension => "ext",
            crate::Backend::Portable => "por",
        };
        let name = format!("pidem_atk2_{test}_{tag}");
        let dsn = crate::fresh_database(&name);
        crate::install(&dsn);
        Db { name, dsn }
    }

    /// A session of the suite's superuser on it.
    pub fn connect(&self) -> Client {
        crate::connect_to(&self.dsn)
    }

    /// Every record, as text, read as the suite's superuser.
    pub fn records(&self) -> Vec<String> {
        self.connect()
            .query(
                "SELECT (r.*)::text FROM idempotency.records r ORDER BY 1",
                &[],
            )
            .unwrap_or_else(|e| panic!("reading idempotency.records: {e}"))
            .iter()
            .map(|r| r.get(0))
            .collect()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failed test: a second panic here would abort the whole binary, so this
            // drop is best effort (the next run's `fresh` drops what it leaves).
            let admin = crate::with_db(&self.dsn, "postgres");
            if let Ok(mut c) = postgres::Client::connect(&admin, postgres::NoTls) {
                let _ = c.batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ));
            }
        } else {
            crate::drop_database(&self.name);
        }
    }
}

/// A login role made for one test (dropped, with what it owns, when this is dropped). The
/// name is unique per test run, so tests can run side by side on one server.
pub struct TestRole {
    pub name: String,
    admin_dsn: String,
}

impl TestRole {
    /// Creates `name_<unique>` with LOGIN and the given extra clause (e.g.
    /// `IN ROLE idempotency_user`), as the suite's superuser on `dsn`.
    pub fn create(dsn: &str, name: &str, clause: &str) -> TestRole {
        let name = crate::scope(name).replace('-', "_");
        let mut c = crate::connect_to(dsn);
        let role = TestRole {
            name,
            admin_dsn: dsn.to_string(),
        };
        c.batch_execute(&format!("CREATE ROLE {} LOGIN {clause}", role.ident()))
            .unwrap_or_else(|e| panic!("CREATE ROLE {}: {e}", role.name));
        role
    }

    /// The role's name, quoted as an identifier.
    pub fn ident(&self) -> String {
        format!("\"{}\"", self.name.replace('"', "\"\""))
    }

    /// A session logged in as this role itself (the private clusters trust local sockets).
    pub fn login(&self) -> Client {
        let mut config: postgres::Config = self
            .admin_dsn
            .parse()
            .unwrap_or_else(|e| panic!("bad DSN {}: {e}", self.admin_dsn));
        // A Config takes the name as it is: no quoting for odd role names.
        config.user(&self.name);
        config
            .connect(postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot log in as {}: {e}", self.name))
    }

    /// A session of the suite's superuser that has `SET ROLE` to this role (the behaviour
    /// suite connects as a superuser; `SET ROLE` is what makes this role the caller).
    pub fn session(&self) -> Client {
        let mut c = crate::connect_to(&self.admin_dsn);
        c.batch_execute(&format!("SET ROLE {}", self.ident()))
            .unwrap_or_else(|e| panic!("SET ROLE {}: {e}", self.name));
        c
    }
}

impl Drop for TestRole {
    fn drop(&mut self) {
        // What it owns in the test's database (which may be dropped already), then the
        // role itself, from the maintenance database.
        if let Ok(mut c) = postgres::Client::connect(&self.admin_dsn, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP OWNED BY {} CASCADE", self.ident()));
        }
        let maintenance = crate::with_db(&self.admin_dsn, "postgres");
        if let Ok(mut c) = postgres::Client::connect(&maintenance, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.ident()));
        }
    }
}

/// A table that only attacker code writes: every hostile function, operator or trigger a
/// test plants inserts a row into it, so an empty canary means none of them ran.
pub struct Canary {
    pub schema: String,
}

impl Canary {
    /// Creates schema `<name>_<unique>` with table `hits`, insertable by every role.
    pub fn create(c: &mut Client, name: &str) -> Canary {
        let schema = crate::scope(name).replace('-', "_");
        c.batch_execute(&format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.hits (what text, at timestamptz DEFAULT clock_timestamp()); \
             GRANT USAGE ON SCHEMA {schema} TO PUBLIC; \
             GRANT INSERT, SELECT ON {schema}.hits TO PUBLIC"
        ))
        .unwrap_or_else(|e| panic!("canary {schema}: {e}"));
        Canary { schema }
    }

    /// `INSERT INTO <canary>.hits VALUES ('<what>')`: the statement attacker code runs.
    pub fn hit(&self, what: &str) -> String {
        format!(
            "INSERT INTO {}.hits (what) VALUES ('{}')",
            self.schema,
            what.replace('\'', "''")
        )
    }

    /// What attacker code recorded (empty when nothing of it ran).
    pub fn hits(&self, c: &mut Client) -> Vec<String> {
        c.query(
            &format!("SELECT what FROM {}.hits ORDER BY at", self.schema),
            &[],
        )
        .unwrap_or_else(|e| panic!("reading the canary: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
    }

    /// Fails the test when any attacker code ran.
    pub fn assert_empty(&self, c: &mut Client) {
        let hits = self.hits(c);
        assert!(hits.is_empty(), "attacker code ran: {hits:?}");
    }

    pub fn drop_it(self, c: &mut Client) {
        let _ = c.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema));
    }
}

/// Everything stored, as text, for before/after comparisons: every record (every column),
/// every policy, and the fence sequence's position. Read as the suite's superuser from the
/// storage schema (`idempotency` for both backends in the suite's database).
pub fn storage_picture(c: &mut Client) -> Vec<String> {
    let mut out: Vec<String> = c
        .query(
            "SELECT 'record ' || (r.*)::text FROM idempotency.records r \
             ORDER BY r.scope, r.key, r.owner::text",
            &[],
        )
        .unwrap_or_else(|e| panic!("reading idempotency.records: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    out.extend(
        c.query(
            "SELECT 'policy ' || (p.*)::text FROM idempotency.policies p ORDER BY p.scope",
            &[],
        )
        .unwrap_or_else(|e| panic!("reading idempotency.policies: {e}"))
        .iter()
        .map(|r| r.get::<_, String>(0)),
    );
    let seq: String = c
        .query_one(
            "SELECT 'fence_seq ' || last_value || ' ' || is_called FROM idempotency.fence_seq",
            &[],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("reading idempotency.fence_seq: {e}"));
    out.push(seq);
    out
}
