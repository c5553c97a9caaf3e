//! Attacks on where our objects live: a non-superuser installing the extension or planting
//! objects in our schemas, overloads that capture unqualified calls, squatting our names
//! before the install, and hostile schema names given to the install.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pg_idempotency_tests::attack::{Canary, TestRole};
use pg_idempotency_tests::*;

/// A database of this test's own (empty: the test installs when it needs to); dropped at
/// the end.
struct TestDb {
    name: String,
    dsn: String,
}

impl TestDb {
    fn empty(job: &str) -> TestDb {
        let suffix = match backend() {
            Backend::Extension => "ext",
            Backend::Portable => "port",
        };
        let name = format!("pidem_atk1_{job}_{suffix}");
        let dsn = fresh_database(&name);
        TestDb { name, dsn }
    }

    fn installed(job: &str) -> TestDb {
        let db = TestDb::empty(job);
        install(&db.dsn);
        db
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        drop_database(&self.name);
    }
}

/// `name` quoted as an identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Every schema, relation, function, type and extension outside the system schemas, with
/// its owner: what an install that fails, or an attack that is refused, must leave as it
/// was.
fn catalog_picture(c: &mut Client) -> Vec<String> {
    c.query(
        "WITH ns AS (SELECT oid, nspname FROM pg_namespace \
                     WHERE nspname <> 'information_schema' AND nspname !~ '^pg_') \
         SELECT 'schema ' || nspname || ' owner ' || nspowner::regrole \
           FROM pg_namespace WHERE oid IN (SELECT oid FROM ns) \
         UNION ALL SELECT 'relation ' || c.oid::regclass || ' owner ' || c.relowner::regrole \
           FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ns) \
         UNION ALL SELECT 'function ' || p.oid::regprocedure || ' owner ' || p.proowner::regrole \
                          || ' ' || coalesce(array_to_string(p.proconfig, ','), '') \
                          || ' definer ' || p.prosecdef \
           FROM pg_proc p WHERE p.pronamespace IN (SELECT oid FROM ns) \
         UNION ALL SELECT 'type ' || t.oid::regtype || ' owner ' || t.typowner::regrole \
           FROM pg_type t WHERE t.typnamespace IN (SELECT oid FROM ns) \
         UNION ALL SELECT 'extension ' || extname || ' ' || extversion FROM pg_extension \
         ORDER BY 1",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Installs the backend under test; Err with what went wrong.
fn try_install(dsn: &str, vars: &[(&str, &str)]) -> Result<(), String> {
    match backend() {
        Backend::Extension => {
            let schema = vars
                .iter()
                .find(|(n, _)| *n == "schema")
                .map(|(_, s)| format!(" SCHEMA {}", ident(s)))
                .unwrap_or_default();
            connect_to(dsn)
                .batch_execute(&format!("CREATE EXTENSION pg_idempotency{schema}"))
                .map_err(|e| format!("{}: {e}", sqlstate(&e)))
        }
        Backend::Portable => {
            let (ok, out) = run_sql_file(dsn, "pg_idempotency.sql", vars, &[]);
            if ok {
                Ok(())
            } else {
                Err(out)
            }
        }
    }
}

fn expect_42501(result: Result<(), postgres::Error>, what: &str) {
    match result {
        Ok(()) => panic!("{what}: accepted"),
        Err(e) => assert_eq!(sqlstate(&e), "42501", "{what}: {e}"),
    }
}

// ---- 3. a non-superuser installing, or planting objects in our schemas ----------------

#[test]
fn a_non_superuser_cannot_create_the_extension() {
    let db = TestDb::empty("create_ext");
    let mut admin = connect_to(&db.dsn);
    let role = TestRole::create(&db.dsn, "atk1_dbadmin", "");
    admin
        .batch_execute(&format!(
            "GRANT CREATE ON DATABASE {} TO {}",
            db.name,
            role.ident()
        ))
        .unwrap();
    let mut c = role.login();
    // The role may install a trusted extension here: the refusal below is about ours.
    c.batch_execute("CREATE EXTENSION citext").unwrap();
    let before = catalog_picture(&mut admin);
    for sql in [
        "CREATE EXTENSION pg_idempotency",
        "CREATE EXTENSION pg_idempotency SCHEMA public",
        "CREATE EXTENSION pg_idempotency VERSION '0.1.0'",
        "CREATE EXTENSION IF NOT EXISTS pg_idempotency CASCADE",
    ] {
        expect_42501(c.batch_execute(sql), sql);
    }
    assert_eq!(catalog_picture(&mut admin), before);
}

/// What a role may try against the installed objects: creating in the storage schema and
/// the API schema, and changing our schema and functions.
const PLANTING: &[&str] = &[
    "CREATE TABLE idempotency.planted (x int)",
    "CREATE TABLE idempotency.records_2 (LIKE idempotency.records)",
    "CREATE VIEW idempotency.planted AS SELECT 1 AS x",
    "CREATE SEQUENCE idempotency.planted",
    "CREATE TYPE idempotency.planted AS (x int)",
    "CREATE FUNCTION idempotency.idem_begin(text, text) RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION idempotency._idem_caller() RETURNS regrole LANGUAGE sql AS 'SELECT 10::regrole'",
    "ALTER SCHEMA idempotency RENAME TO taken",
    "DROP SCHEMA idempotency CASCADE",
    "CREATE FUNCTION public.idem_begin(text, text) RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION public.idem_begin(varchar, varchar) RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE OR REPLACE FUNCTION public.idem_hash(request jsonb) RETURNS bytea \
       LANGUAGE sql AS 'SELECT ''\\x00''::bytea'",
    "ALTER FUNCTION public.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval) \
       SET search_path = public",
    "ALTER FUNCTION public.idem_complete(text, text, bigint, jsonb, boolean, boolean) \
       RENAME TO idem_complete_old",
    "ALTER FUNCTION public.idem_canonical(jsonb) SECURITY DEFINER",
    "DROP FUNCTION public.idem_release(text, text, bigint)",
    "COMMENT ON FUNCTION public.idem_hash(jsonb) IS 'planted'",
];

#[test]
fn no_ordinary_role_can_plant_or_change_objects_in_our_schemas() {
    let db = TestDb::installed("plant");
    let mut admin = connect_to(&db.dsn);
    let roles = [
        TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user"),
        TestRole::create(&db.dsn, "atk1_ops", "IN ROLE idempotency_admin"),
        TestRole::create(&db.dsn, "atk1_stranger", ""),
    ];
    let before = catalog_picture(&mut admin);
    for role in &roles {
        let mut c = role.login();
        for sql in PLANTING {
            expect_42501(c.batch_execute(sql), &format!("{}: {sql}", role.name));
        }
    }
    assert_eq!(catalog_picture(&mut admin), before);
}

/// A schema `trap` owned by `attacker`, readable by everyone (a shared utility schema, or
/// `public` in a database still granting CREATE to PUBLIC), holding two more specific
/// overloads of idem_begin that write the canary and fake a claim.
fn plant_overloads(admin: &mut Client, attacker: &TestRole, canary: &Canary) {
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA trap AUTHORIZATION {0}; GRANT USAGE ON SCHEMA trap TO PUBLIC",
            attacker.ident()
        ))
        .unwrap();
    let mut c = attacker.login();
    for args in ["text", "varchar"] {
        c.batch_execute(&format!(
            "CREATE FUNCTION trap.idem_begin(scope {args}, key {args}) \
               RETURNS TABLE (outcome text, fence bigint) LANGUAGE plpgsql AS \
             $h$ BEGIN {}; RETURN QUERY SELECT 'claimed'::text, 1::bigint; END $h$; \
             GRANT EXECUTE ON FUNCTION trap.idem_begin({args}, {args}) TO PUBLIC",
            canary.hit(&format!("trap.idem_begin({args}, {args})"))
        ))
        .unwrap();
    }
}

fn claim_as(c: &mut Client, call: &str) -> String {
    c.query_one(&format!("SELECT outcome FROM {call}"), &[])
        .unwrap_or_else(|e| panic!("{call}: {e}"))
        .get(0)
}

fn stored_keys(admin: &mut Client) -> Vec<String> {
    admin
        .query("SELECT key FROM idempotency.records ORDER BY key", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn an_overload_on_a_victims_path_captures_unqualified_calls_and_never_qualified_ones() {
    let db = TestDb::installed("overload");
    let mut admin = connect_to(&db.dsn);
    let canary = Canary::create(&mut admin, "atk1");
    let attacker = TestRole::create(&db.dsn, "atk1_attacker", "");
    let victim = TestRole::create(&db.dsn, "atk1_victim", "IN ROLE idempotency_user");
    plant_overloads(&mut admin, &attacker, &canary);
    let mut v = victim.login();

    // The trap first on the path: an unqualified call is the attacker's.
    v.batch_execute("SET search_path = trap, public").unwrap();
    claim_as(&mut v, "idem_begin('s', 'k1')");
    assert_eq!(canary.hits(&mut admin), vec!["trap.idem_begin(text, text)"]);
    // Ours first: the path order does not protect a call whose arguments are varchar
    // (a driver's parameter type, a varchar column): the exact-type overload wins.
    v.batch_execute("SET search_path = public, trap").unwrap();
    claim_as(&mut v, "idem_begin('s'::varchar, 'k2'::varchar)");
    assert_eq!(canary.hits(&mut admin).len(), 2);
    assert!(
        stored_keys(&mut admin).is_empty(),
        "the captured calls stored nothing"
    );

    // Qualified with our functions' schema, every call is ours, whatever the path.
    for path in ["trap, public", "public, trap"] {
        v.batch_execute(&format!("SET search_path = {path}"))
            .unwrap();
        let n = stored_keys(&mut admin).len();
        let outcome = claim_as(
            &mut v,
            &format!("public.idem_begin('s'::varchar, 'q{n}'::varchar)"),
        );
        assert_eq!(outcome, "claimed");
        claim_as(&mut v, &format!("public.idem_begin('s', 'r{n}')"));
    }
    assert_eq!(stored_keys(&mut admin), vec!["q0", "q2", "r0", "r2"]);
    assert_eq!(
        canary.hits(&mut admin).len(),
        2,
        "a qualified call was captured"
    );
}

// ---- 4. squatting: our names taken before the install --------------------------------

/// Objects another role creates before the install, and how it removes them again.
const SQUATS: &[(&str, &str)] = &[
    ("CREATE SCHEMA idempotency", "DROP SCHEMA idempotency"),
    (
        "CREATE SCHEMA idempotency; \
         CREATE TABLE idempotency.records (scope text, key text, response jsonb); \
         GRANT ALL ON SCHEMA idempotency TO PUBLIC; GRANT ALL ON idempotency.records TO PUBLIC",
        "DROP SCHEMA idempotency CASCADE",
    ),
    (
        "CREATE SCHEMA idempotency; CREATE TYPE idempotency.begin_result AS (outcome text)",
        "DROP SCHEMA idempotency CASCADE",
    ),
    (
        "CREATE FUNCTION public.idem_begin(scope text, key text, request jsonb DEFAULT NULL, \
           ttl interval DEFAULT NULL, lease interval DEFAULT NULL, on_cache_hit text DEFAULT NULL, \
           on_mismatch text DEFAULT NULL, wait interval DEFAULT '0', claim_token uuid DEFAULT NULL, \
           unresolved_ttl interval DEFAULT NULL) \
         RETURNS text LANGUAGE sql AS $$ SELECT 'claimed' $$; \
         GRANT EXECUTE ON FUNCTION public.idem_begin(text, text, jsonb, interval, interval, \
           text, text, interval, uuid, interval) TO PUBLIC",
        "DROP FUNCTION public.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval)",
    ),
    (
        "CREATE FUNCTION public.idem_hash(request jsonb) RETURNS bytea LANGUAGE sql \
           AS $$ SELECT '\\x00'::bytea $$",
        "DROP FUNCTION public.idem_hash(jsonb)",
    ),
];

/// The 0.2.0 signatures, squatted.
const SQUATS_0_2_0: &[(&str, &str)] = &[
    (
        "CREATE FUNCTION public.idem_lookup(scope text, key text, owner regrole DEFAULT NULL) \
           RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
        "DROP FUNCTION public.idem_lookup(text, text, regrole)",
    ),
    (
        "CREATE FUNCTION public.idem_forget(scope text, key text, owner regrole DEFAULT NULL) \
           RETURNS boolean LANGUAGE sql AS $$ SELECT true $$",
        "DROP FUNCTION public.idem_forget(text, text, regrole)",
    ),
];

/// For each squat, in a database of its own: the install fails, the database is as the
/// squatter left it (the squatter still owns its objects, nothing of ours was added);
/// once the squat is removed, the install succeeds.
fn squatting_fails_the_install(job: &str, squats: &[(&str, &str)]) {
    for (i, (squat, undo)) in squats.iter().enumerate() {
        let db = TestDb::empty(&format!("{job}{i}"));
        let mut admin = connect_to(&db.dsn);
        let squatter = TestRole::create(&db.dsn, "atk1_squatter", "");
        admin
            .batch_execute(&format!(
                "GRANT CREATE ON DATABASE {0} TO {1}; GRANT CREATE ON SCHEMA public TO {1}",
                db.name,
                squatter.ident()
            ))
            .unwrap();
        let mut q = squatter.login();
        q.batch_execute(squat)
            .unwrap_or_else(|e| panic!("{squat}: {e}"));
        let before = catalog_picture(&mut admin);
        assert!(
            try_install(&db.dsn, &[]).is_err(),
            "the install adopted: {squat}"
        );
        assert_eq!(catalog_picture(&mut admin), before, "after: {squat}");
        q.batch_execute(undo).unwrap();
        try_install(&db.dsn, &[]).unwrap_or_else(|e| panic!("after {undo}: {e}"));
        drop(q);
        drop(squatter);
    }
}

#[test]
fn our_names_taken_before_the_install_make_it_fail_and_nothing_is_adopted() {
    squatting_fails_the_install("squat", SQUATS);
}

#[test]
fn the_0_2_0_signatures_taken_before_the_install_make_it_fail() {
    squatting_fails_the_install("squat2_", SQUATS_0_2_0);
}

// ---- 5. hostile schema names for the install -----------------------------------------

/// Names that break naive quoting in each context a name could be spliced into (a
/// literal, an identifier, a dollar-quoted body, a statement list); the longer ones would,
/// if spliced, write the canary `k.hits`.
const HOSTILE_NAMES: &[&str] = &[
    "a'b",
    "a\"b",
    "a$b",
    "a\\b",
    "$$x",
    "x;select 1",
    "$fn$x",
    "Mixed Case",
    "x'); insert into k.hits default values; --",
    "x\"; insert into k.hits default values; --",
    "$fn$; insert into k.hits default values; --",
];

/// A canary with a short schema name (`k`), so that an injection fits in a name.
fn short_canary(c: &mut Client) -> Canary {
    c.batch_execute(
        "CREATE SCHEMA k; \
         CREATE TABLE k.hits (what text DEFAULT 'injected', at timestamptz DEFAULT clock_timestamp()); \
         GRANT USAGE ON SCHEMA k TO PUBLIC; GRANT INSERT, SELECT ON k.hits TO PUBLIC",
    )
    .unwrap();
    Canary { schema: "k".into() }
}

/// Every API function, schema-qualified with `api`, with its results checked.
fn exercise_qualified(c: &mut Client, api: &str) {
    let one = |c: &mut Client, sql: &str| -> String {
        c.query_one(&format!("SELECT ({sql})::text"), &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    };
    let fence = one(
        c,
        &format!("SELECT fence FROM {api}.idem_begin('s', 'k', '{{\"a\": 1}}')"),
    );
    let done = format!("SELECT state FROM {api}.idem_complete('s', 'k', {fence}, '{{\"ok\": 1}}')");
    assert_eq!(one(c, &done), "succeeded");
    let replay = format!("SELECT outcome FROM {api}.idem_begin('s', 'k', '{{\"a\": 1}}')");
    assert_eq!(one(c, &replay), "replay");
    assert_eq!(
        one(c, &format!("SELECT state FROM {api}.idem_lookup('s', 'k')")),
        "succeeded"
    );
    let held = one(c, &format!("SELECT fence FROM {api}.idem_begin('s', 'k2')"));
    let extend = format!(
        "SELECT lease_until IS NOT NULL FROM {api}.idem_extend('s', 'k2', {held}, '5 minutes')"
    );
    assert_eq!(one(c, &extend), "true");
    one(
        c,
        &format!("SELECT 1 FROM {api}.idem_release('s', 'k2', {held})"),
    );
    assert_eq!(
        one(c, &format!("SELECT {api}.idem_forget('s', 'k')")),
        "true"
    );
    assert_eq!(
        one(
            c,
            &format!("SELECT {api}.idem_canonical('{{\"b\": 1, \"a\": 2}}')")
        ),
        "{\"a\":2,\"b\":1}"
    );
    let hash = format!("SELECT {api}.idem_hash('{{}}') = sha256('{{}}')");
    assert_eq!(one(c, &hash), "true");
    let policy = format!("SELECT ttl FROM {api}.idem_set_policy('s', ttl => '2 hours')");
    assert_eq!(one(c, &policy), "02:00:00");
    assert_eq!(
        one(c, &format!("SELECT count(*) FROM {api}.idem_policies()")),
        "1"
    );
    assert_eq!(
        one(c, &format!("SELECT {api}.idem_drop_policy('s')")),
        "true"
    );
    assert_eq!(one(c, &format!("SELECT {api}.idem_purge_expired()")), "0");
    one(c, &format!("SELECT count(*) FROM {api}.idem_metrics()"));
}

/// One hostile name: installs into exactly that schema (the portable variant: storage in
/// `<name> store`) or fails leaving nothing; works; uninstalls to the database as it was.
fn install_under(name: &str, n: usize) {
    let db = TestDb::empty(&format!("name{n}"));
    let mut admin = connect_to(&db.dsn);
    let canary = short_canary(&mut admin);
    admin
        .batch_execute(&format!("CREATE SCHEMA {}", ident(name)))
        .unwrap();
    let before = catalog_picture(&mut admin);
    let storage = format!("{name} store");
    let vars = [("schema", name), ("storage", storage.as_str())];
    if let Err(e) = try_install(&db.dsn, &vars) {
        // The extension refuses names with quotes, backslashes or dollars in scripts that
        // use @extschema@ (PostgreSQL's own guard); that must leave nothing behind.
        assert_eq!(backend(), Backend::Extension, "{name}: {e}");
        assert_eq!(catalog_picture(&mut admin), before, "{name}");
        canary.assert_empty(&mut admin);
        return;
    }
    let homes: Vec<String> = admin
        .query(
            "SELECT DISTINCT pronamespace::regnamespace::text FROM pg_proc \
             WHERE proname LIKE 'idem\\_%'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(homes, vec![ident(name)], "{name}: the functions' schema");
    let store = match backend() {
        Backend::Extension => "idempotency".to_string(),
        Backend::Portable => ident(&storage),
    };
    admin
        .batch_execute(&format!("SELECT {}.idem_begin('here', 'k')", ident(name)))
        .unwrap();
    let records: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {store}.records WHERE scope = 'here'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(records, 1, "{name}: the storage schema");
    exercise_qualified(&mut admin, &ident(name));
    canary.assert_empty(&mut admin);
    match backend() {
        Backend::Extension => admin
            .batch_execute("DROP EXTENSION pg_idempotency")
            .unwrap(),
        Backend::Portable => {
            let (ok, out) = run_sql_file(&db.dsn, "uninstall.sql", &vars, &[]);
            assert!(ok, "{name}: uninstall failed:\n{out}");
        }
    }
    assert_eq!(catalog_picture(&mut admin), before, "{name}: left behind");
    canary.assert_empty(&mut admin);
}

#[test]
fn hostile_schema_names_install_exactly_there_work_and_uninstall() {
    let failed: Vec<String> = HOSTILE_NAMES
        .iter()
        .enumerate()
        .filter_map(|(n, name)| {
            catch_unwind(AssertUnwindSafe(|| install_under(name, n)))
                .err()
                .map(|_| name.to_string())
        })
        .collect();
    assert!(failed.is_empty(), "failed for {failed:?} (messages above)");
}
