//! The portable variant as plain-SQL migrations (xtask/src/render/migration.rs): the
//! committed files are the generator's rendering, and what a migration tool's transaction
//! makes of a plain file is what psql makes of the script it comes from, object for object,
//! for the default schemas and for names that need quoting.

use pg_idempotency_tests::catalogue::describe;
use pg_idempotency_tests::*;
use xtask::render::migration::{committed, migration_sql, versions, Step, CURRENT};

/// Names a user might choose that only work quoted (a space, capitals, a double quote).
const API: &str = "App API";
const STORAGE: &str = "app \"idem\" store";

fn portable_pass() -> bool {
    if backend() != Backend::Portable {
        skip(
            Skip::NotApplicable,
            "the portable variant's migrations: tested in the portable pass",
        );
        return false;
    }
    true
}

fn plain(step: &Step, api: &str, storage: &str) -> String {
    migration_sql(&root(), step, api, storage).unwrap_or_else(|e| panic!("{step:?}: {e}"))
}

/// As a migration tool applies a migration: the file as one query in its transaction.
fn apply(dsn: &str, sql: &str) -> Result<(), postgres::Error> {
    let mut c = connect_to(dsn);
    let mut tx = c.transaction()?;
    tx.batch_execute(sql)?;
    tx.commit()
}

/// A database with release `version` installed by psql from its scripts, as released.
fn psql_install(db: &str, version: &str, api: &str, storage: &str) -> String {
    let dsn = fresh_database(db);
    let files =
        xtask::render::migration::sources(&root(), &Step::Install { to: version.into() }).unwrap();
    if api != "public" {
        connect_to(&dsn)
            .batch_execute(&format!("CREATE SCHEMA \"{}\"", api.replace('"', "\"\"")))
            .unwrap();
    }
    for file in files {
        let file = file.strip_prefix("sql/").unwrap();
        let (ok, out) = run_sql_file(&dsn, file, &[("schema", api), ("storage", storage)], &[]);
        assert!(ok, "psql -f {file}:\n{out}");
    }
    dsn
}

#[test]
fn the_committed_migrations_are_the_generators_rendering() {
    let rendered = committed(&root()).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(root().join("sql/migrations"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sql"))
        .map(|n| format!("sql/migrations/{n}"))
        .collect();
    names.sort();
    let mut expected: Vec<String> = rendered.iter().map(|(f, _)| f.clone()).collect();
    expected.sort();
    assert_eq!(
        names, expected,
        "sql/migrations/ holds other files than it renders: run cargo xtask render-sql"
    );
    for (file, text) in rendered {
        let kept = std::fs::read_to_string(root().join(&file)).unwrap();
        assert!(kept == text, "{file} is stale: run cargo xtask render-sql");
    }
}

#[test]
fn a_plain_install_is_the_psql_install_of_each_release() {
    if !portable_pass() {
        return;
    }
    let mut cases: Vec<(String, &str, &str)> = versions(&root())
        .unwrap()
        .into_iter()
        .map(|v| (v, "public", "idempotency"))
        .collect();
    cases.push((CURRENT.to_string(), API, STORAGE));
    for (version, api, storage) in cases {
        let tag = version.replace('.', "_");
        let expected = describe(
            &mut connect_to(&psql_install("pgidem_plain_psql", &version, api, storage)),
            api,
            storage,
        );
        let dsn = fresh_database("pgidem_plain_tool");
        if api != "public" {
            connect_to(&dsn)
                .batch_execute(&format!("CREATE SCHEMA \"{api}\""))
                .unwrap();
        }
        apply(
            &dsn,
            &plain(
                &Step::Install {
                    to: version.clone(),
                },
                api,
                storage,
            ),
        )
        .unwrap_or_else(|e| panic!("plain install {version} into {api}/{storage}: {e:?}"));
        let got = describe(&mut connect_to(&dsn), api, storage);
        assert!(got.len() > 40, "{version}: {} objects described", got.len());
        assert_eq!(
            got, expected,
            "{version} ({api}, {storage}, {tag}): plain and psql installs differ"
        );
    }
    drop_database("pgidem_plain_psql");
    drop_database("pgidem_plain_tool");
}

#[test]
fn plain_upgrades_from_the_base_are_a_fresh_install() {
    if !portable_pass() {
        return;
    }
    let expected = describe(
        &mut connect_to(&psql_install(
            "pgidem_plain_fresh",
            CURRENT,
            "public",
            "idempotency",
        )),
        "public",
        "idempotency",
    );
    let chain = versions(&root()).unwrap();
    let dsn = fresh_database("pgidem_plain_chain");
    apply(
        &dsn,
        &plain(
            &Step::Install {
                to: chain[0].clone(),
            },
            "public",
            "idempotency",
        ),
    )
    .unwrap();
    for w in chain.windows(2) {
        let step = Step::Upgrade {
            from: w[0].clone(),
            to: w[1].clone(),
        };
        apply(&dsn, &plain(&step, "public", "idempotency"))
            .unwrap_or_else(|e| panic!("{step:?}: {e:?}"));
        // The guard: the same upgrade again is refused, and changes nothing.
        let again = apply(&dsn, &plain(&step, "public", "idempotency")).unwrap_err();
        assert_eq!(
            sqlstate(&again),
            "55000",
            "{step:?} applied twice: {again:?}"
        );
    }
    assert_eq!(
        describe(&mut connect_to(&dsn), "public", "idempotency"),
        expected
    );
    drop_database("pgidem_plain_chain");
    drop_database("pgidem_plain_fresh");
}

#[test]
fn run_statement_by_statement_outside_a_transaction_it_refuses_and_changes_nothing() {
    if !portable_pass() {
        return;
    }
    let dir = root().join("target/test-migrations");
    std::fs::create_dir_all(&dir).unwrap();
    // Its own file: the test command runs the two PostgreSQL versions' passes side by side.
    let file = dir.join(format!("plain-install-{}.sql", std::process::id()));
    std::fs::write(
        &file,
        plain(
            &Step::Install { to: CURRENT.into() },
            "public",
            "idempotency",
        ),
    )
    .unwrap();
    let dsn = fresh_database("pgidem_plain_autocommit");
    // psql without --single-transaction sends each statement as its own transaction, as a
    // tool that splits a file and runs it in autocommit does.
    let args = ["-v", "ON_ERROR_STOP=1", "-f"].map(String::from);
    let (ok, out) = run_psql(
        &dsn,
        &[&args[..], &[file.to_string_lossy().into_owned()]].concat(),
        &[],
    );
    assert!(!ok && out.contains("runs in one transaction only"), "{out}");
    let mut c = connect_to(&dsn);
    let left: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'idempotency')
                  + (SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem\\_%')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "a refused migration left objects");
    // The whole file as one query is one (implicit) transaction: accepted.
    c.batch_execute(&std::fs::read_to_string(&file).unwrap())
        .unwrap();
    let v: String = c
        .query_one("SELECT version FROM idempotency.installed", &[])
        .unwrap()
        .get(0);
    assert_eq!(v, CURRENT);
    drop(c);
    drop_database("pgidem_plain_autocommit");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn the_migrations_after_it_in_the_same_transaction_keep_their_settings() {
    if !portable_pass() {
        return;
    }
    let dsn = fresh_database("pgidem_plain_settings");
    let mut c = connect_to(&dsn);
    c.batch_execute(
        "CREATE SCHEMA app; SET search_path = app, public; SET client_min_messages = notice",
    )
    .unwrap();
    let mut tx = c.transaction().unwrap();
    tx.batch_execute(&plain(
        &Step::Install { to: "0.4.0".into() },
        "public",
        "idempotency",
    ))
    .unwrap();
    tx.batch_execute(&plain(
        &Step::Upgrade {
            from: "0.4.0".into(),
            to: CURRENT.into(),
        },
        "public",
        "idempotency",
    ))
    .unwrap();
    let shown = |tx: &mut postgres::Transaction, name: &str| -> String {
        tx.query_one(&format!("SHOW {name}"), &[]).unwrap().get(0)
    };
    assert_eq!(shown(&mut tx, "search_path"), "app, public");
    assert_eq!(shown(&mut tx, "client_min_messages"), "notice");
    // An application's next migration, unqualified, lands where its search_path says.
    tx.batch_execute("CREATE TABLE orders (id int)").unwrap();
    tx.commit().unwrap();
    let at: String = c
        .query_one("SELECT 'orders'::regclass::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(at, "orders");
    let ns: String = c
        .query_one(
            "SELECT relnamespace::regnamespace::text FROM pg_class WHERE relname = 'orders'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(ns, "app");
    drop(c);
    drop_database("pgidem_plain_settings");
}
