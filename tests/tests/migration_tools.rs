//! Real migration tools apply the portable variant's plain-SQL migrations
//! (scripts/portable-migration.sh): an older release as one migration, its upgrade as a
//! second, the current install into schemas that need quoting, and a failing migration
//! that leaves nothing. Each result is checked against psql's install of the same version,
//! object for object, and through the API. Run by scripts/test.sh as a step of its own
//! (`cargo test -p pg_idempotency_tests --test migration_tools`, after
//! scripts/migration-tools.sh); a tool that is not installed is reported skipped.

#[path = "migration_tools/tools.rs"]
mod tools;

use std::path::PathBuf;

use pg_idempotency_tests::catalogue::describe;
use pg_idempotency_tests::*;
use tools::{Alembic, Dbmate, NodePgMigrate, Tool};
use xtask::render::migration::{migration_sql, sources, Step, CURRENT};

const OLDER: &str = "0.4.0";

fn plain(step: &Step, api: &str, storage: &str) -> String {
    migration_sql(&root(), step, api, storage).unwrap_or_else(|e| panic!("{step:?}: {e}"))
}

fn install(to: &str) -> Step {
    Step::Install { to: to.into() }
}

/// The port of the server under test (the tools connect over TCP to 127.0.0.1).
fn port() -> String {
    dsn()
        .split_whitespace()
        .find_map(|p| p.strip_prefix("port="))
        .unwrap_or("5432")
        .to_string()
}

/// A fresh project folder and database for one tool's test: (folder, database name).
fn project(tool: &dyn Tool, test: &str) -> Option<(PathBuf, String)> {
    if let Err(why) = tool.program() {
        skip(Skip::Missing, &why);
        return None;
    }
    let name = format!("pgidem_mig_{}_{test}", tool.name().replace('-', "_"));
    let dir = root().join("target/test-migrations").join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    fresh_database(&name);
    Some((dir, name))
}

/// What psql's install of `version` into `api`/`storage` describes, in a database of its own.
fn psql_catalogue(db: &str, version: &str, api: &str, storage: &str) -> Vec<String> {
    let dsn = fresh_database(db);
    if api != "public" {
        connect_to(&dsn)
            .batch_execute(&format!("CREATE SCHEMA {}", ident(api)))
            .unwrap();
    }
    for file in sources(&root(), &install(version)).unwrap() {
        let file = file.strip_prefix("sql/").unwrap();
        let (ok, out) = run_sql_file(&dsn, file, &[("schema", api), ("storage", storage)], &[]);
        assert!(ok, "psql -f {file}:\n{out}");
    }
    let lines = describe(&mut connect_to(&dsn), api, storage);
    drop_database(db);
    lines
}

fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn installed_version(c: &mut Client, storage: &str) -> String {
    c.query_one(
        &format!("SELECT version FROM {}.installed", ident(storage)),
        &[],
    )
    .unwrap()
    .get(0)
}

/// A claim, its completion and a replay through the API in schema `api`.
fn claim(c: &mut Client, api: &str, key: &str) -> i64 {
    let row = c
        .query_one(
            &format!(
                "SELECT outcome, fence FROM {}.idem_begin('send_email', $1)",
                ident(api)
            ),
            &[&key],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed");
    row.get(1)
}

fn complete_and_replay(c: &mut Client, api: &str, key: &str, fence: i64) {
    let state: String = c
        .query_one(
            &format!(
                "SELECT state FROM {}.idem_complete('send_email', $1, $2, '{{\"email_id\": 7}}')",
                ident(api)
            ),
            &[&key, &fence],
        )
        .unwrap()
        .get(0);
    assert_eq!(state, "succeeded");
    let row = c
        .query_one(
            &format!(
                "SELECT outcome, response::text FROM {}.idem_begin('send_email', $1)",
                ident(api)
            ),
            &[&key],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "replay");
    assert_eq!(row.get::<_, String>(1), "{\"email_id\": 7}");
}

/// An older release as one migration, a claim while it runs, then its upgrade and an
/// application's own migration in the next run: the catalogue is a fresh psql install's,
/// the claim is completed with its fence after the upgrade, and the application's table
/// lands where its search_path says.
fn scenario_upgrade(tool: &dyn Tool) {
    let Some((dir, db)) = project(tool, "upgrade") else {
        return;
    };
    let expected = psql_catalogue(&format!("{db}_psql"), CURRENT, "public", "idempotency");
    tool.write(&dir, 1, &plain(&install(OLDER), "public", "idempotency"));
    let (ok, out) = tool.up(&dir, &port(), &db);
    assert!(ok, "{}: installing {OLDER}:\n{out}", tool.name());
    let mut c = connect_to(&with_db(&dsn(), &db));
    assert_eq!(installed_version(&mut c, "idempotency"), OLDER);
    let fence = claim(&mut c, "public", "call-1");

    tool.write(
        &dir,
        2,
        &plain(
            &Step::Upgrade {
                from: OLDER.into(),
                to: CURRENT.into(),
            },
            "public",
            "idempotency",
        ),
    );
    tool.write(&dir, 3, "CREATE TABLE outbox (id bigint PRIMARY KEY);");
    let (ok, out) = tool.up(&dir, &port(), &db);
    assert!(ok, "{}: upgrading to {CURRENT}:\n{out}", tool.name());
    assert_eq!(installed_version(&mut c, "idempotency"), CURRENT);
    assert_eq!(
        describe(&mut c, "public", "idempotency"),
        expected,
        "{}: upgraded by the tool",
        tool.name()
    );
    let ns: String = c
        .query_one(
            "SELECT relnamespace::regnamespace::text FROM pg_class WHERE relname = 'outbox'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        ns,
        "public",
        "{}: the application's migration after ours",
        tool.name()
    );
    complete_and_replay(&mut c, "public", "call-1", fence);
    drop(c);
    drop_database(&db);
}

const API: &str = "Billing API";
const STORAGE: &str = "billing \"idem\"";

/// The current install, with a schema of the application's first migration as its API
/// schema and a storage schema whose name needs quoting.
fn scenario_schemas(tool: &dyn Tool) {
    let Some((dir, db)) = project(tool, "schemas") else {
        return;
    };
    let expected = psql_catalogue(&format!("{db}_psql"), CURRENT, API, STORAGE);
    tool.write(&dir, 1, &format!("CREATE SCHEMA {};", ident(API)));
    tool.write(&dir, 2, &plain(&install(CURRENT), API, STORAGE));
    let (ok, out) = tool.up(&dir, &port(), &db);
    assert!(
        ok,
        "{}: installing into {API:?} / {STORAGE:?}:\n{out}",
        tool.name()
    );
    let mut c = connect_to(&with_db(&dsn(), &db));
    assert_eq!(installed_version(&mut c, STORAGE), CURRENT);
    let got = describe(&mut c, API, STORAGE);
    assert!(
        got.iter()
            .any(|l| l.starts_with("function \"Billing API\".idem_begin(")),
        "{got:?}"
    );
    assert_eq!(got, expected, "{}: installed by the tool", tool.name());
    let fence = claim(&mut c, API, "call-2");
    complete_and_replay(&mut c, API, "call-2", fence);
    drop(c);
    drop_database(&db);
}

/// A migration that fails half-way (its API schema is missing: the storage schema, its
/// tables and helpers come before the first API function) leaves nothing and is not
/// recorded; once the install is in, an upgrade from another version is refused and
/// changes nothing.
fn scenario_failing(tool: &dyn Tool) {
    let Some((dir, db)) = project(tool, "failing") else {
        return;
    };
    tool.write(
        &dir,
        1,
        &plain(&install(CURRENT), "no_such_api", "idem_failed"),
    );
    let (ok, out) = tool.up(&dir, &port(), &db);
    assert!(
        !ok,
        "{}: a failing migration succeeded:\n{out}",
        tool.name()
    );
    assert!(
        out.contains("no_such_api"),
        "{}: the error is not shown:\n{out}",
        tool.name()
    );
    let mut c = connect_to(&with_db(&dsn(), &db));
    let left: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'idem_failed')
                  + (SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem\\_%' OR proname LIKE '\\_idem\\_%')
                  + (SELECT count(*) FROM pg_type WHERE typname = 'begin_result')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        left,
        0,
        "{}: the failed migration left objects",
        tool.name()
    );
    assert_eq!(
        tool.applied(&mut c),
        Vec::<String>::new(),
        "{}: recorded a failed migration",
        tool.name()
    );

    tool.write(&dir, 1, &plain(&install(CURRENT), "public", "idempotency"));
    let (ok, out) = tool.up(&dir, &port(), &db);
    assert!(ok, "{}: {out}", tool.name());
    let before = (
        describe(&mut c, "public", "idempotency"),
        tool.applied(&mut c),
    );
    tool.write(
        &dir,
        2,
        &plain(
            &Step::Upgrade {
                from: OLDER.into(),
                to: CURRENT.into(),
            },
            "public",
            "idempotency",
        ),
    );
    let (ok, out) = tool.up(&dir, &port(), &db);
    assert!(
        !ok && out.contains(&format!("from {OLDER}, not from {CURRENT}")),
        "{}: {out}",
        tool.name()
    );
    assert_eq!(
        (
            describe(&mut c, "public", "idempotency"),
            tool.applied(&mut c)
        ),
        before
    );
    drop(c);
    drop_database(&db);
}

macro_rules! each_tool {
    ($($tool:ident: $t:expr;)*) => {$(
        mod $tool {
            use super::*;
            #[test]
            fn an_older_release_then_its_upgrade() {
                scenario_upgrade(&$t)
            }
            #[test]
            fn the_current_install_into_schemas_that_need_quoting() {
                scenario_schemas(&$t)
            }
            #[test]
            fn a_failing_migration_leaves_nothing() {
                scenario_failing(&$t)
            }
        }
    )*};
}

each_tool! {
    alembic: Alembic;
    dbmate: Dbmate;
    node_pg_migrate: NodePgMigrate;
}
