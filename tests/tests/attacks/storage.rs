//! Attacks on the stored state itself: direct access to the storage schema's tables and
//! fence sequence, a user raising the security-relevant limits, and a session turning off
//! synchronous commit for the transactions that claim and complete.

use pg_idempotency_tests::attack::{storage_picture, TestRole};
use pg_idempotency_tests::*;

/// A database of this test's own with the backend under test installed (on the server
/// under test, or on `server` when given); dropped at the end.
struct TestDb {
    name: String,
    dsn: String,
    admin_dsn: String,
}

impl TestDb {
    fn new(job: &str) -> TestDb {
        TestDb::on(job, &dsn())
    }

    fn on(job: &str, server_dsn: &str) -> TestDb {
        let suffix = match backend() {
            Backend::Extension => "ext",
            Backend::Portable => "port",
        };
        let name = format!("pidem_atk1_{job}_{suffix}");
        let mut admin = connect_to(server_dsn);
        // Two statements: a batch would be one transaction, which these cannot run in.
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        let dsn = format!(
            "{} dbname={name}",
            server_dsn
                .split_whitespace()
                .filter(|p| !p.starts_with("dbname="))
                .collect::<Vec<_>>()
                .join(" ")
        );
        install(&dsn);
        TestDb {
            name,
            dsn,
            admin_dsn: server_dsn.to_string(),
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin_dsn, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// A role of each kind: an ordinary user, an admin, and a role that is neither.
fn three_roles(dsn: &str) -> [TestRole; 3] {
    [
        TestRole::create(dsn, "atk1_user", "IN ROLE idempotency_user"),
        TestRole::create(dsn, "atk1_ops", "IN ROLE idempotency_admin"),
        TestRole::create(dsn, "atk1_stranger", ""),
    ]
}

// ---- 6. direct access to the storage -------------------------------------------------

/// Records in each state and a policy, made through the API by the superuser.
fn seed(c: &mut Client) {
    c.batch_execute(
        "SELECT idem_complete('seed', 'done', (SELECT fence FROM idem_begin('seed', 'done')), \
                              '{\"ok\": true}'); \
         SELECT idem_begin('seed', 'running'); \
         SELECT idem_set_policy('seed', ttl => '2 hours')",
    )
    .unwrap();
}

/// storage_picture, plus the portable variant's own tables.
fn picture(c: &mut Client) -> Vec<String> {
    let mut out = storage_picture(c);
    for table in ["idempotency.installed", "idempotency.settings"] {
        let exists: bool = c
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .unwrap()
            .get(0);
        if exists {
            let rows = c
                .query(
                    &format!("SELECT (t.*)::text FROM {table} t ORDER BY 1"),
                    &[],
                )
                .unwrap();
            out.extend(
                rows.iter()
                    .map(|r| format!("{table} {}", r.get::<_, String>(0))),
            );
        }
    }
    out
}

/// The storage's tables: both backends' and the portable variant's own (settings: 0.2.0).
fn storage_tables() -> Vec<&'static str> {
    let mut tables = vec!["records", "policies"];
    if backend() == Backend::Portable {
        tables.extend(["installed", "settings"]);
    }
    tables
}

/// Statements on one table of the storage, each to be refused.
fn table_attacks(table: &str, column: &str) -> Vec<String> {
    let t = format!("idempotency.{table}");
    vec![
        format!("SELECT * FROM {t}"),
        format!("SELECT count(*) FROM {t}"),
        format!("INSERT INTO {t} DEFAULT VALUES"),
        format!("UPDATE {t} SET {column} = {column}"),
        format!("DELETE FROM {t}"),
        format!("TRUNCATE {t}"),
        format!("ALTER TABLE {t} ADD COLUMN planted int"),
        format!("ALTER TABLE {t} DISABLE TRIGGER ALL"),
        format!("DROP TABLE {t}"),
        format!(
            "CREATE TRIGGER planted BEFORE INSERT ON {t} FOR EACH ROW \
             EXECUTE FUNCTION suppress_redundant_updates_trigger()"
        ),
        format!("CREATE INDEX planted ON {t} ((1))"),
        format!("GRANT ALL ON {t} TO PUBLIC"),
        format!("COMMENT ON TABLE {t} IS 'planted'"),
    ]
}

/// Statements on the fence sequence, by name and by OID (an OID skips the schema's USAGE
/// check, so the sequence's own privileges must refuse too).
fn sequence_attacks(seq_oid: u32) -> Vec<String> {
    let mut out = vec![
        "SELECT * FROM idempotency.fence_seq".to_string(),
        "ALTER SEQUENCE idempotency.fence_seq RESTART WITH 1".into(),
        "ALTER SEQUENCE idempotency.fence_seq CYCLE MAXVALUE 10".into(),
        "DROP SEQUENCE idempotency.fence_seq".into(),
    ];
    for seq in [
        "'idempotency.fence_seq'".to_string(),
        format!("{seq_oid}::oid"),
    ] {
        out.extend([
            format!("SELECT nextval({seq})"),
            format!("SELECT setval({seq}, 1)"),
            format!("SELECT setval({seq}, 1, false)"),
            format!("SELECT currval({seq})"),
        ]);
    }
    out
}

fn message(e: &postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_default()
}

fn expect_42501<T>(result: Result<T, postgres::Error>, what: &str) {
    match result {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => assert_eq!(sqlstate(&e), "42501", "{what}: {e}"),
    }
}

#[test]
fn direct_access_to_the_storage_is_refused_and_changes_nothing() {
    let db = TestDb::new("direct");
    let mut admin = connect_to(&db.dsn);
    seed(&mut admin);
    let seq_oid: u32 = admin
        .query_one("SELECT 'idempotency.fence_seq'::regclass::oid", &[])
        .unwrap()
        .get(0);
    let before = picture(&mut admin);
    assert!(before.len() > 3, "nothing seeded: {before:?}");
    let roles = three_roles(&db.dsn);
    for role in &roles {
        let mut c = role.login();
        let who = &role.name;
        for table in storage_tables() {
            // A real column: the statement is refused for its privileges, not its text.
            let column: String = admin
                .query_one(
                    "SELECT coalesce((SELECT attname::text FROM pg_attribute \
                       WHERE attrelid = to_regclass($1) AND attnum = 1), 'scope')",
                    &[&format!("idempotency.{table}")],
                )
                .unwrap()
                .get(0);
            for sql in table_attacks(table, &column) {
                expect_42501(c.batch_execute(&sql), &format!("{who}: {sql}"));
            }
            let t = format!("idempotency.{table}");
            // Each COPY on a session of its own: a refused COPY leaves the client's
            // protocol state unusable for the next statement.
            expect_42501(
                role.login()
                    .copy_out(format!("COPY {t} TO STDOUT").as_str())
                    .map(|_| ()),
                &format!("{who}: COPY {t} TO STDOUT"),
            );
            expect_42501(
                role.login()
                    .copy_in(format!("COPY {t} FROM STDIN").as_str())
                    .map(|_| ()),
                &format!("{who}: COPY {t} FROM STDIN"),
            );
            let mut tx = c.transaction().unwrap();
            expect_42501(
                tx.batch_execute(&format!("LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE")),
                &format!("{who}: LOCK TABLE {t}"),
            );
            drop(tx);
        }
        for sql in sequence_attacks(seq_oid) {
            expect_42501(c.batch_execute(&sql), &format!("{who}: {sql}"));
        }
        expect_42501(
            c.batch_execute("SELECT pg_sequence_last_value('idempotency.fence_seq')"),
            &format!("{who}: pg_sequence_last_value by name"),
        );
        // By OID: refused (PostgreSQL 15) or NULL (18 answers NULL without the privilege).
        let last = c.query_one("SELECT pg_sequence_last_value($1::oid)", &[&seq_oid]);
        match last {
            Ok(row) => assert_eq!(row.get::<_, Option<i64>>(0), None, "{who}: a fence leaked"),
            Err(e) => assert_eq!(sqlstate(&e), "42501", "{who}: {e}"),
        }
    }
    assert_eq!(picture(&mut admin), before);
}

// ---- 7. the security-relevant limits -------------------------------------------------

const LIMITS: &[(&str, &str)] = &[
    ("pg_idempotency.max_key_bytes", "2048"),
    ("pg_idempotency.max_scope_bytes", "512"),
    ("pg_idempotency.max_ttl", "2147483647"),
    ("pg_idempotency.max_response_bytes", "1GB"),
];

/// Calls just above the default limits, each refused with its SQLSTATE (and the message
/// of the limit, not of a bad setting): key, scope, ttl, response.
fn assert_default_limits_hold(c: &mut Client) {
    let long_key = "k".repeat(600);
    let e = c
        .query_one("SELECT outcome FROM idem_begin('limits', $1)", &[&long_key])
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "key over 512 bytes: {e}");
    assert!(message(&e).contains("too long"), "{e}");
    let long_scope = "s".repeat(200);
    let e = c
        .query_one("SELECT outcome FROM idem_begin($1, 'k')", &[&long_scope])
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "scope over 128 bytes: {e}");
    let e = c
        .query_one(
            "SELECT outcome FROM idem_begin('limits', 'k', ttl => '60 days')",
            &[],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&e), "22023", "ttl over 30 days: {e}");
    assert!(message(&e).contains("too long"), "{e}");
    let key = scope("big");
    let fence: i64 = c
        .query_one("SELECT fence FROM idem_begin('limits', $1)", &[&key])
        .unwrap()
        .get(0);
    let big = format!("\"{}\"", "x".repeat(1_100_000));
    let e = c
        .query_one(
            "SELECT state FROM idem_complete('limits', $1, $2, $3::text::jsonb)",
            &[&key, &fence, &big],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&e), "IK004", "response over 1 MB: {e}");
}

/// `SET pg_idempotency.default_ttl` reaches the functions (a user's own default): the
/// mechanism the limits must not go through.
fn assert_user_default_ttl_applies(c: &mut Client) {
    c.batch_execute("SET pg_idempotency.default_ttl = '2h'")
        .unwrap();
    c.batch_execute("SELECT idem_begin('limits', 'default-ttl')")
        .unwrap();
    let ttl: String = c
        .query_one(
            "SELECT ttl::text FROM idem_lookup('limits', 'default-ttl')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(ttl, "02:00:00");
    c.batch_execute("RESET pg_idempotency.default_ttl").unwrap();
}

#[test]
fn a_user_cannot_set_the_limits_where_the_library_is_loaded() {
    // The suite's servers preload the extension's library, which defines the limits as
    // superuser-only settings, in a database of either backend.
    let db = TestDb::new("limits");
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = user.login();
    for (name, value) in LIMITS {
        expect_42501(c.batch_execute(&format!("SET {name} = '{value}'")), name);
        let mut tx = c.transaction().unwrap();
        expect_42501(
            tx.batch_execute(&format!("SET LOCAL {name} = '{value}'")),
            name,
        );
        drop(tx);
        expect_42501(
            c.batch_execute(&format!("SELECT set_config('{name}', '{value}', false)")),
            name,
        );
        expect_42501(
            c.batch_execute(&format!(
                "ALTER ROLE {} SET {name} = '{value}'",
                user.ident()
            )),
            name,
        );
    }
    let with_option = format!(
        "{} user={} options='-c pg_idempotency.max_key_bytes=2048'",
        db.dsn, user.name
    );
    let refused = postgres::Client::connect(&with_option, NoTls).map(|_| ());
    expect_42501(refused, "a limit in the connection's options");
    assert_user_default_ttl_applies(&mut c);
    assert_default_limits_hold(&mut c);

    // The limits do decide: raised by the superuser, the same long key is accepted. The
    // extension's limits are settings; the portable variant's live in its settings table.
    let raise = match backend() {
        Backend::Extension => "SET pg_idempotency.max_key_bytes = 1024",
        Backend::Portable => "UPDATE idempotency.settings SET max_key_bytes = 1024",
    };
    let mut admin = connect_to(&db.dsn);
    admin.batch_execute(raise).unwrap();
    let long_key = "k".repeat(600);
    admin
        .query_one("SELECT outcome FROM idem_begin('limits', $1)", &[&long_key])
        .unwrap();
}

#[test]
fn a_users_setting_does_not_change_the_portable_limits() {
    if backend() != Backend::Portable {
        skip(
            Skip::NotApplicable,
            "the extension's limits are superuser-only settings (the test above)",
        );
        return;
    }
    // Where the portable variant is meant to run: a server without our library, so the
    // pg_idempotency.* names are plain custom settings that any role may set.
    let server = TempCluster::start("atk1-limits", &[]);
    let db = TestDb::on("portable_limits", &server.dsn("postgres"));
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = user.login();
    for (name, value) in LIMITS {
        // Accepted or refused: either way it must not reach the limits.
        let _ = c.batch_execute(&format!("SET {name} = '{value}'"));
    }
    assert_user_default_ttl_applies(&mut c);
    assert_default_limits_hold(&mut c);

    // Set for the role itself, in every later session.
    for (name, value) in LIMITS {
        let _ = c.batch_execute(&format!(
            "ALTER ROLE {} SET {name} = '{value}'",
            user.ident()
        ));
    }
    let mut later = user.login();
    assert_default_limits_hold(&mut later);
    drop(later);
    drop(c);
    drop(user);
    drop(db);
}

// ---- 8. synchronous_commit -----------------------------------------------------------

fn show(c: &mut postgres::Transaction<'_>) -> String {
    c.query_one("SHOW synchronous_commit", &[]).unwrap().get(0)
}

#[test]
fn a_session_below_synchronous_commit_on_does_not_reach_claims_and_completions() {
    let db = TestDb::new("sync");
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = user.login();

    // Off for the whole session: each call's own transaction still commits synchronously,
    // and the session's setting is back after it.
    c.batch_execute("SET synchronous_commit = off").unwrap();
    let mut tx = c.transaction().unwrap();
    assert_eq!(show(&mut tx), "off");
    let fence: i64 = tx
        .query_one("SELECT fence FROM idem_begin('sync', 'k')", &[])
        .unwrap()
        .get(0);
    assert_eq!(show(&mut tx), "on", "after idem_begin");
    tx.commit().unwrap();
    let session: String = c.query_one("SHOW synchronous_commit", &[]).unwrap().get(0);
    assert_eq!(session, "off");

    // Off for one transaction (SET LOCAL): the same for each call that writes.
    let calls = [
        format!("SELECT idem_extend('sync', 'k', {fence}, '5 minutes')"),
        format!("SELECT idem_complete('sync', 'k', {fence}, '{{}}')"),
        "SELECT idem_begin('sync', 'k2')".into(),
        "SELECT idem_release('sync', 'k2', (SELECT fence FROM idem_lookup('sync', 'k2')))".into(),
    ];
    for call in calls {
        let mut tx = c.transaction().unwrap();
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .unwrap();
        assert_eq!(show(&mut tx), "off");
        tx.batch_execute(&call)
            .unwrap_or_else(|e| panic!("{call}: {e}"));
        assert_eq!(show(&mut tx), "on", "after {call}");
        tx.commit().unwrap();
    }

    // `local` and `remote_write` acknowledge before a synchronous standby has the commit:
    // raised too (a failover would lose the claim; F9 measured it). `on` and
    // `remote_apply` wait for the standby already and are kept.
    for (session, during) in [
        ("local", "on"),
        ("remote_write", "on"),
        ("on", "on"),
        ("remote_apply", "remote_apply"),
    ] {
        c.batch_execute(&format!("SET synchronous_commit = {session}"))
            .unwrap();
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&format!("SELECT idem_begin('sync', 'k3-{session}')"))
            .unwrap();
        assert_eq!(show(&mut tx), during, "a session with {session}");
        tx.commit().unwrap();
    }
}
