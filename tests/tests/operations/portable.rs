//! The portable variant's own scripts (sql/): install into chosen schemas, install hygiene,
//! uninstall, and the move to the extension. They run in the portable pass of the suite
//! (`PGIDEM_BACKEND=portable`), each in a database of its own; the rest of the suite runs
//! the API itself against both backends.

use pg_idempotency_tests::attack::TestRole;
use pg_idempotency_tests::*;

fn portable_pass() -> bool {
    if backend() != Backend::Portable {
        skip(
            Skip::NotApplicable,
            "the portable variant's own scripts: tested in the portable pass",
        );
        return false;
    }
    true
}

fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

const OUR_FUNCTIONS: &str =
    "SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem\\_%' OR proname LIKE '\\_idem\\_%'";

#[test]
fn installs_into_chosen_schemas_and_uninstalls_cleanly() {
    if !portable_pass() {
        return;
    }
    let db = "pgidem_portable_schemas";
    let dsn = fresh_database(db);
    let mut c = connect_to(&dsn);
    c.batch_execute(r#"CREATE SCHEMA "my app""#).unwrap();
    let vars = [("schema", "my app"), ("storage", "idem \"store\"")];
    let (ok, out) = run_sql_file(&dsn, "pg_idempotency.sql", &vars, &[]);
    assert!(ok, "install failed:\n{out}");

    let claimed: String = c
        .query_one(r#"SELECT outcome FROM "my app".idem_begin('s', 'k')"#, &[])
        .unwrap()
        .get(0);
    assert_eq!(claimed, "claimed");
    assert_eq!(
        count(&mut c, r#"SELECT count(*) FROM "idem ""store""".records"#),
        1
    );
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem\\_%' AND pronamespace = 'public'::regnamespace"),
        0,
        "nothing goes to public when another schema is chosen"
    );
    let version: String = c
        .query_one(r#"SELECT version FROM "idem ""store""".installed"#, &[])
        .unwrap()
        .get(0);
    assert!(!version.is_empty());

    let (ok, out) = run_sql_file(&dsn, "uninstall.sql", &vars, &[]);
    assert!(ok, "uninstall failed:\n{out}");
    assert_eq!(count(&mut c, OUR_FUNCTIONS), 0, "functions left behind");
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'idem \"store\"'"
        ),
        0
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'my app'"
        ),
        1,
        "the API schema is the user's: it stays"
    );
    drop(c);
    drop_database(db);
}

#[test]
fn a_storage_schema_someone_else_made_fails_the_install_and_changes_nothing() {
    if !portable_pass() {
        return;
    }
    let db = "pgidem_portable_taken";
    let dsn = fresh_database(db);
    let mut c = connect_to(&dsn);
    c.batch_execute("CREATE SCHEMA idempotency; CREATE TABLE idempotency.mine (x int)")
        .unwrap();
    let (ok, out) = run_sql_file(&dsn, "pg_idempotency.sql", &[], &[]);
    assert!(
        !ok,
        "the install adopted a schema it did not create:\n{out}"
    );
    assert!(out.contains("already exists"), "{out}");
    assert_eq!(count(&mut c, OUR_FUNCTIONS), 0);
    assert_eq!(count(&mut c, "SELECT count(*) FROM idempotency.mine"), 0);

    // Uninstall refuses a schema that is not a portable install.
    let (ok, out) = run_sql_file(&dsn, "uninstall.sql", &[], &[]);
    assert!(!ok, "uninstall removed a schema it did not install:\n{out}");
    assert!(out.contains("no portable pg_idempotency install"), "{out}");
    assert_eq!(count(&mut c, "SELECT count(*) FROM idempotency.mine"), 0);
    drop(c);
    drop_database(db);
}

#[test]
fn the_installers_search_path_cannot_reach_into_the_functions() {
    if !portable_pass() {
        return;
    }
    let db = "pgidem_portable_hijack";
    let dsn = fresh_database(db);
    let mut c = connect_to(&dsn);
    // A hostile schema first on the installer's path: its sha256, convert_to and = would be
    // bound into the functions if the script resolved names through that path.
    c.batch_execute(
        "CREATE SCHEMA evil; CREATE TABLE evil.calls (what text); \
         CREATE FUNCTION evil.sha256(bytea) RETURNS bytea LANGUAGE plpgsql AS \
           $$ BEGIN INSERT INTO evil.calls VALUES ('sha256'); RETURN '\\x00'; END $$; \
         CREATE FUNCTION evil.convert_to(text, name) RETURNS bytea LANGUAGE plpgsql AS \
           $$ BEGIN INSERT INTO evil.calls VALUES ('convert_to'); RETURN '\\x00'; END $$; \
         CREATE FUNCTION evil.texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS \
           $$ BEGIN INSERT INTO evil.calls VALUES ('='); RETURN true; END $$; \
         CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.texteq)",
    )
    .unwrap();
    let (ok, out) = run_sql_file(
        &dsn,
        "pg_idempotency.sql",
        &[],
        &[("PGOPTIONS", "-c search_path=evil,public,pg_catalog")],
    );
    assert!(ok, "install failed:\n{out}");
    let same: bool = c
        .query_one(
            "SELECT public.idem_hash('{\"a\": [1, \"x\"]}') = pg_catalog.sha256(pg_catalog.convert_to('{\"a\":[1,\"x\"]}', 'UTF8'))",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(same);
    let b: String = c
        .query_one(
            "SELECT outcome FROM public.idem_begin('s', 'k', '{\"a\": 1}')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(b, "claimed");
    assert_eq!(count(&mut c, "SELECT count(*) FROM evil.calls"), 0);
    drop(c);
    drop_database(db);
}

#[test]
fn moving_to_the_extension_keeps_every_table_and_the_fences() {
    if !portable_pass() {
        return;
    }
    let db = "pgidem_portable_move";
    let dsn = fresh_database(db);
    install(&dsn);
    let mut c = connect_to(&dsn);
    let done = begin(&mut c, "move", "done");
    complete(
        &mut c,
        "move",
        "done",
        done.fence.unwrap(),
        r#"{"sent": 1}"#,
    )
    .unwrap();
    let running = begin(&mut c, "move", "running");
    for i in 0..10 {
        begin(&mut c, "move", &format!("filler-{i}"));
    }
    c.batch_execute("SELECT idem_set_policy('move', ttl => '2 hours')")
        .unwrap();
    // A resolution in the audit: a claim whose lease lapsed, released by an operator.
    c.batch_execute("SELECT idem_begin('move', 'lapsed', lease => '100 ms')")
        .unwrap();
    wait_for_lapse(&mut c, "move", "lapsed");
    c.batch_execute(
        "SELECT idem_resolve('move', 'lapsed', (SELECT fence FROM idem_lookup('move', 'lapsed')), 'in_progress', 'release')",
    )
    .unwrap();
    let max_fence = count(&mut c, "SELECT max(fence) FROM idempotency.records");
    let metrics = "SELECT claimed_total, replay_total, in_progress_total FROM idem_metrics() WHERE scope = 'move'";
    let metrics_before: (i64, i64, i64) = {
        let r = c.query_one(metrics, &[]).unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert!(metrics_before.0 > 0, "{metrics_before:?}");
    // Every table that moves holds rows, so that a table the move forgot shows here:
    // each of the portable storage's tables but the two that do not move (what they hold
    // becomes the extension's own: its version, the server's settings).
    let stays = ["installed", "settings"];
    let tables: Vec<(String, i64)> = c
        .query(
            "SELECT relname::text FROM pg_class
             WHERE relnamespace = 'idempotency'::regnamespace AND relkind = 'r' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|t| !stays.contains(&t.as_str()))
        .map(|t| {
            let rows = count(&mut c, &format!("SELECT count(*) FROM idempotency.{t}"));
            (t, rows)
        })
        .collect();
    assert!(tables.len() >= 4, "{tables:?}");
    for (t, rows) in &tables {
        assert!(
            *rows > 0,
            "the test gives idempotency.{t} no row before the move, so the move is not checked to keep it"
        );
    }
    drop(c);

    // A limit its owner changed: the extension reads limits from the server's settings, so
    // the move says how to keep it.
    connect_to(&dsn)
        .batch_execute("UPDATE idempotency.settings SET max_key_bytes = 1024")
        .unwrap();

    let (ok, out) = run_sql_file(&dsn, "migrate-to-extension.sql", &[], &[]);
    assert!(ok, "migration failed:\n{out}");
    assert!(
        out.contains("ALTER SYSTEM SET pg_idempotency.max_key_bytes = '1024';"),
        "{out}"
    );
    assert!(!out.contains("max_ttl"), "only the changed limits:\n{out}");

    let mut c = connect_to(&dsn);
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_idempotency'"
        ),
        1
    );
    assert_eq!(
        count(
            &mut c,
            "SELECT count(*) FROM pg_namespace WHERE nspname = '_idem_migrating'"
        ),
        0
    );
    for (t, rows) in &tables {
        assert_eq!(
            count(&mut c, &format!("SELECT count(*) FROM idempotency.{t}")),
            *rows,
            "idempotency.{t}: sql/migrate-to-extension.sql must copy it"
        );
    }
    let metrics_after: (i64, i64, i64) = {
        let r = c.query_one(metrics, &[]).unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    assert_eq!(metrics_after, metrics_before, "the outcome counts go on");
    let replay = begin(&mut c, "move", "done");
    assert_eq!(replay.outcome, "replay");
    assert_eq!(replay.response.as_deref(), Some(r#"{"sent": 1}"#));
    assert_eq!(replay.upstream_key, done.upstream_key);
    let dup = begin(&mut c, "move", "running");
    assert_eq!(dup.outcome, "in_progress");
    // The holder that claimed before the move completes with its fence.
    let state = complete(&mut c, "move", "running", running.fence.unwrap(), "{}").unwrap();
    assert_eq!(state, "succeeded");
    let fresh_claim = begin(&mut c, "move", "new");
    assert!(fresh_claim.fence.unwrap() > max_fence);
    let ttl: String = c
        .query_one(
            "SELECT ttl::text FROM idem_policies() WHERE scope = 'move'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(ttl, "02:00:00");
    assert_eq!(
        count(&mut c, "SELECT count(*) FROM idempotency.records"),
        13
    );
    drop(c);
    drop_database(db);
}

#[test]
fn settings_are_read_with_their_units_and_a_bad_value_is_refused() {
    if !portable_pass() {
        return;
    }
    // The reader of the pg_idempotency.* settings (default_ttl and default_lease at each
    // call; the limits once, when the install seeds them), on a setting of its own (the
    // private clusters preload the extension, which reserves the pg_idempotency prefix and
    // checks those values itself when they are set).
    let mut c = connect();
    // Internal helpers run under the API functions' pinned search_path.
    c.batch_execute("SET search_path = pg_catalog, idempotency, pg_temp")
        .unwrap();
    let read = |c: &mut Client, value: &str| {
        c.batch_execute(&format!("SET idem_test.seconds = '{value}'"))
            .unwrap();
        c.query_one(
            "SELECT idempotency._idem_setting('idem_test.seconds', 60, 's', 1, 86400)",
            &[],
        )
        .map(|r| r.get::<_, i64>(0))
    };
    assert_eq!(read(&mut c, "").unwrap(), 60, "unset: the default");
    assert_eq!(read(&mut c, "90").unwrap(), 90);
    assert_eq!(read(&mut c, "2min").unwrap(), 120);
    assert_eq!(read(&mut c, "1h").unwrap(), 3600);
    assert_eq!(read(&mut c, "1500ms").unwrap(), 2);
    for bad in ["soon", "5 parsecs", "0", "2d"] {
        let err = read(&mut c, bad).unwrap_err();
        assert_eq!(sqlstate(&err), "22023", "{bad}");
        let db = err.as_db_error().unwrap();
        assert!(
            db.message().contains("idem_test.seconds"),
            "{}",
            db.message()
        );
        assert!(db.hint().is_some_and(|h| h.contains("RESET")), "{bad}");
    }
    // The bytes reader takes PostgreSQL's memory units.
    c.batch_execute("SET idem_test.bytes = '64kB'").unwrap();
    let bytes: i64 = c
        .query_one(
            "SELECT idempotency._idem_setting('idem_test.bytes', 1, 'B', 0, 1048576)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(bytes, 65536);
}

/// Everything the portable install leaves in a database: its schemas, functions, tables,
/// sequences and types, as one sorted list.
fn installed_objects(c: &mut Client) -> Vec<String> {
    c.query(
        "SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname = 'idempotency' \
         UNION ALL SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p \
           WHERE p.proname LIKE 'idem\\_%' OR p.proname LIKE '\\_idem\\_%' \
         UNION ALL SELECT 'relation ' || c.oid::regclass::text FROM pg_class c \
           JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'idempotency' \
         UNION ALL SELECT 'type ' || t.oid::regtype::text FROM pg_type t \
           JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'idempotency' \
         ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// `psql -f sql/pg_idempotency.sql`, as most install pages say it: no --single-transaction,
/// no ON_ERROR_STOP.
fn plain_install(dsn: &str, file: &str) -> (bool, String) {
    run_psql(dsn, &["-f".to_string(), sql_file(file)], &[])
}

#[test]
fn a_plain_psql_f_installs_all_of_it_or_nothing() {
    if !portable_pass() {
        return;
    }
    // The reference: the install as the docs say it.
    let reference_db = fresh_database("pgidem_portable_reference");
    let (ok, out) = run_sql_file(&reference_db, "pg_idempotency.sql", &[], &[]);
    assert!(ok, "{out}");
    let reference = installed_objects(&mut connect_to(&reference_db));
    assert!(reference.len() > 20, "{reference:?}");

    // Plainly: the same objects, and it works.
    let dsn = fresh_database("pgidem_portable_plain");
    let mut c = connect_to(&dsn);
    let (ok, out) = plain_install(&dsn, "pg_idempotency.sql");
    assert!(ok, "{out}");
    assert!(!out.contains("WARNING"), "{out}");
    assert_eq!(installed_objects(&mut c), reference);
    let outcome: String = c
        .query_one("SELECT outcome FROM idem_begin('s', 'k')", &[])
        .unwrap()
        .get(0);
    assert_eq!(outcome, "claimed");

    // Plainly, uninstalled: nothing left.
    let (ok, out) = plain_install(&dsn, "uninstall.sql");
    assert!(ok, "{out}");
    assert_eq!(installed_objects(&mut c), Vec::<String>::new());

    // Plainly, failing near its end (idem_metrics is among the last objects it creates,
    // and one already exists): psql stops at the error and nothing stays behind.
    c.batch_execute("CREATE FUNCTION public.idem_metrics() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        .unwrap();
    let (_, out) = plain_install(&dsn, "pg_idempotency.sql");
    assert!(out.contains("already exists"), "{out}");
    assert_eq!(
        installed_objects(&mut c),
        vec!["function idem_metrics()".to_string()],
        "a failed plain install left objects behind:\n{out}"
    );
    c.batch_execute("DROP FUNCTION public.idem_metrics()")
        .unwrap();

    // Inside the caller's own transaction it leaves the commit to the caller: rolled back,
    // nothing stays.
    let args = [
        "-c",
        "BEGIN",
        "-f",
        &sql_file("pg_idempotency.sql"),
        "-c",
        "ROLLBACK",
    ]
    .map(String::from);
    let (ok, out) = run_psql(&dsn, &args, &[]);
    assert!(ok, "{out}");
    assert_eq!(installed_objects(&mut c), Vec::<String>::new(), "{out}");
    drop(c);
    drop_database("pgidem_portable_plain");
    drop_database("pgidem_portable_reference");
}

fn limit_of(c: &mut Client, column: &str) -> String {
    c.query_one(
        &format!("SELECT {column}::text FROM idempotency.settings"),
        &[],
    )
    .unwrap()
    .get(0)
}

fn begin_key(c: &mut Client, key: &str) -> Result<String, postgres::Error> {
    c.query_one("SELECT outcome FROM idem_begin('limits', $1)", &[&key])
        .map(|r| r.get(0))
}

#[test]
fn the_limits_live_in_the_storage_schema_and_only_its_owner_changes_them() {
    if !portable_pass() {
        return;
    }
    let db = "pgidem_portable_limits";
    let dsn = fresh_database(db);
    // Seeded from the installer's settings where it set them, else the defaults.
    let (ok, out) = run_sql_file(
        &dsn,
        "pg_idempotency.sql",
        &[],
        &[(
            "PGOPTIONS",
            "-c pg_idempotency.max_key_bytes=16 -c pg_idempotency.max_ttl=2d",
        )],
    );
    assert!(ok, "install failed:\n{out}");
    let mut c = connect_to(&dsn);
    assert_eq!(limit_of(&mut c, "max_key_bytes"), "16");
    assert_eq!(limit_of(&mut c, "max_ttl"), "2 days");
    assert_eq!(limit_of(&mut c, "max_scope_bytes"), "128");
    assert_eq!(limit_of(&mut c, "max_response_bytes"), "1048576");
    assert_eq!(begin_key(&mut c, &"k".repeat(16)).unwrap(), "claimed");
    let err = begin_key(&mut c, &"k".repeat(17)).unwrap_err();
    assert_eq!(sqlstate(&err), "22023");

    // A session's setting no longer reaches them, not even a superuser's.
    c.batch_execute("SET pg_idempotency.max_key_bytes = 1024")
        .unwrap();
    let err = begin_key(&mut c, &"k".repeat(17)).unwrap_err();
    assert_eq!(sqlstate(&err), "22023", "a session's SET loosened a limit");

    // An ordinary role neither reads nor writes them.
    let user = TestRole::create(&dsn, "limits_user", "IN ROLE idempotency_user");
    let mut u = user.login();
    for sql in [
        "SELECT * FROM idempotency.settings",
        "UPDATE idempotency.settings SET max_key_bytes = 2048",
    ] {
        let err = u.batch_execute(sql).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{sql}");
    }
    assert_eq!(limit_of(&mut c, "max_key_bytes"), "16");

    // Their owner changes them with UPDATE, and the next call obeys.
    c.batch_execute("UPDATE idempotency.settings SET max_key_bytes = 32")
        .unwrap();
    assert_eq!(begin_key(&mut u, &"u".repeat(32)).unwrap(), "claimed");
    let err = begin_key(&mut u, &"u".repeat(33)).unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
    let detail = err
        .as_db_error()
        .unwrap()
        .detail()
        .unwrap_or_default()
        .to_string();
    assert!(detail.contains("the limit is 32"), "{detail}");

    // A value out of the extension's range is refused, naming the limit, and nothing changes.
    for (column, bad) in [
        ("max_key_bytes", "4096"),
        ("max_scope_bytes", "0"),
        ("max_ttl", "'0 seconds'"),
        ("max_ttl", "'-1 day'"),
        ("max_response_bytes", "-1"),
    ] {
        let err = c
            .batch_execute(&format!("UPDATE idempotency.settings SET {column} = {bad}"))
            .unwrap_err();
        assert_eq!(sqlstate(&err), "22023", "{column} = {bad}");
        let e = err.as_db_error().unwrap();
        assert!(e.message().contains(column), "{}", e.message());
        assert!(e.hint().is_some_and(|h| h.contains(column)), "{column}");
    }
    assert_eq!(limit_of(&mut c, "max_key_bytes"), "32");
    assert_eq!(limit_of(&mut c, "max_ttl"), "2 days");

    // Without its row there are no limits to check against: calls are refused, not let
    // through, until the defaults are back.
    c.batch_execute("DELETE FROM idempotency.settings").unwrap();
    let err = begin_key(&mut u, "k").unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    c.batch_execute("INSERT INTO idempotency.settings DEFAULT VALUES")
        .unwrap();
    assert_eq!(limit_of(&mut c, "max_key_bytes"), "512");
    assert_eq!(limit_of(&mut c, "max_ttl"), "30 days");
    assert_eq!(begin_key(&mut u, &"v".repeat(512)).unwrap(), "claimed");
    drop(u);
    drop(user);
    drop(c);
    drop_database(db);
}

#[test]
fn uninstall_and_the_move_refuse_an_install_not_upgraded() {
    if !portable_pass() {
        return;
    }
    let db = "pgidem_portable_old";
    let dsn = fresh_database(db);
    let (ok, out) = run_sql_file(&dsn, "released/pg_idempotency--0.1.0.sql", &[], &[]);
    assert!(ok, "{out}");
    let mut c = connect_to(&dsn);
    let before = count(&mut c, OUR_FUNCTIONS);
    for file in ["uninstall.sql", "migrate-to-extension.sql"] {
        let args = ["-v", "VERBOSITY=verbose", "-f", &sql_file(file)].map(String::from);
        let (ok, out) = run_psql(&dsn, &args, &[]);
        assert!(!ok, "{file} ran on 0.1.0:\n{out}");
        assert!(out.contains("55000"), "{file}:\n{out}");
        assert!(out.contains("sql/upgrade/"), "{file}:\n{out}");
        assert_eq!(
            count(&mut c, OUR_FUNCTIONS),
            before,
            "{file} changed something"
        );
    }
    drop(c);
    drop_database(db);
}
