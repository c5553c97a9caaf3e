//! The catalogue lint (DESIGN 7): every function of ours is immune to the caller's
//! search_path, no SECURITY DEFINER function of ours is executable by PUBLIC, and the
//! extension is not `trusted`. Read from the catalogue of the installed backend, so a
//! function added later without its `SET search_path` fails the suite. A second test breaks
//! one thing at a time in a scratch database and shows the lint names exactly that.

use pg_idempotency_tests::*;
use postgres::GenericClient;

/// The storage schema of both backends in the suite's databases.
const STORAGE: &str = "idempotency";

/// One line per problem: `<function signature>: <problem>`. Ours: the extension's members
/// (`pg_depend`), or for the portable variant the `idem_%` functions of the API schema and
/// everything in the storage schema. A function is immune to the caller's search_path when
/// its `proconfig` pins one that ends in `pg_temp` (else the temp schema is searched first),
/// or when it is one of the documented alternatives:
/// - a LANGUAGE c function of the extension: its SQL is in Rust with every name
///   schema-qualified (pg_idempotency/src/store.rs);
/// - a portable `_idem_*` helper of the storage schema that only the pinned API functions
///   reach: not SECURITY DEFINER, in a schema where no role but its owner has USAGE.
///
/// $1: the storage schema; $2: 'extension' or 'portable'.
const LINT: &str = r#"
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'pg_idempotency'),
storage AS (SELECT oid, nspowner, nspacl FROM pg_namespace WHERE nspname = $1),
api AS (SELECT DISTINCT pronamespace AS oid FROM pg_proc WHERE proname = 'idem_begin'),
-- Roles other than its owner that may use the storage schema (no row: none may).
storage_users AS (
    SELECT a.grantee FROM storage s, aclexplode(s.nspacl) a
    WHERE a.privilege_type = 'USAGE' AND a.grantee <> s.nspowner),
ours AS (
    SELECT d.objid AS oid FROM pg_depend d, ext
    WHERE $2 = 'extension' AND d.classid = 'pg_proc'::regclass
      AND d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
    UNION
    SELECT p.oid FROM pg_proc p
    WHERE $2 = 'portable'
      AND ((p.pronamespace IN (SELECT oid FROM api) AND p.proname LIKE 'idem\_%')
           OR p.pronamespace IN (SELECT oid FROM storage)))
SELECT p.oid::regprocedure::text || ': ' || problem
FROM ours JOIN pg_proc p USING (oid) JOIN pg_language l ON l.oid = p.prolang,
LATERAL (
    SELECT 'search_path not pinned' WHERE NOT (
        EXISTS (SELECT FROM unnest(p.proconfig) setting
                WHERE setting LIKE 'search_path=%' AND setting LIKE '%pg\_temp')
        OR ($2 = 'extension' AND l.lanname = 'c')
        OR ($2 = 'portable' AND p.pronamespace IN (SELECT oid FROM storage)
            AND p.proname LIKE '\_idem\_%' AND NOT p.prosecdef
            AND NOT EXISTS (SELECT FROM storage_users)))
    UNION ALL
    -- A NULL proacl is the default: PUBLIC may execute.
    SELECT 'SECURITY DEFINER and executable by PUBLIC' WHERE p.prosecdef
        AND (p.proacl IS NULL
             OR EXISTS (SELECT FROM aclexplode(p.proacl) a
                        WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))
) problems(problem)
ORDER BY 1
"#;

fn backend_name() -> &'static str {
    match backend() {
        Backend::Extension => "extension",
        Backend::Portable => "portable",
    }
}

fn lint(c: &mut impl GenericClient) -> Vec<String> {
    c.query(LINT, &[&STORAGE, &backend_name()])
        .unwrap_or_else(|e| panic!("the lint query: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// How many functions the lint looked at, so it cannot pass by finding none of ours.
fn our_function_count(c: &mut impl GenericClient) -> i64 {
    let sql = match backend() {
        Backend::Extension => {
            "SELECT count(*) FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid \
             WHERE e.extname = 'pg_idempotency' AND d.classid = 'pg_proc'::regclass \
               AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'"
        }
        Backend::Portable => {
            "SELECT count(*) FROM pg_proc p \
             WHERE p.pronamespace = $1::text::regnamespace \
                OR (p.proname LIKE 'idem\\_%' AND p.pronamespace IN \
                    (SELECT pronamespace FROM pg_proc WHERE proname = 'idem_begin'))"
        }
    };
    let params: Vec<&(dyn postgres::types::ToSql + Sync)> = match backend() {
        Backend::Extension => vec![],
        Backend::Portable => vec![&STORAGE],
    };
    c.query_one(sql, &params).unwrap().get(0)
}

/// The signature of one of our functions by name, as ALTER FUNCTION takes it.
fn signature(c: &mut impl GenericClient, schema: &str, name: &str) -> String {
    c.query_one(
        "SELECT p.oid::regprocedure::text FROM pg_proc p \
         WHERE p.proname = $2 AND p.pronamespace = $1::text::regnamespace",
        &[&schema, &name],
    )
    .unwrap_or_else(|e| panic!("{schema}.{name}: {e}"))
    .get(0)
}

fn api_schema(c: &mut impl GenericClient) -> String {
    c.query_one(
        "SELECT DISTINCT pronamespace::regnamespace::text FROM pg_proc WHERE proname = 'idem_begin'",
        &[],
    )
    .unwrap()
    .get(0)
}

#[test]
fn our_functions_are_immune_to_the_callers_search_path_and_not_public_when_definer() {
    let mut c = connect();
    let count = our_function_count(&mut c);
    assert!(
        count >= 13,
        "the lint sees {count} functions of ours: is the {} backend installed?",
        backend_name()
    );
    let found = lint(&mut c);
    assert!(
        found.is_empty(),
        "functions of ours that break DESIGN 7:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_extension_is_not_trusted() {
    let mut c = connect();
    let versions: Vec<(String, bool)> = c
        .query(
            "SELECT version, trusted FROM pg_available_extension_versions \
             WHERE name = 'pg_idempotency' ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    if versions.is_empty() && backend() == Backend::Portable {
        skip(
            Skip::NotApplicable,
            "the extension is not available on this server (portable variant only)",
        );
        return;
    }
    assert!(!versions.is_empty(), "pg_idempotency is not available");
    let trusted: Vec<_> = versions.iter().filter(|(_, t)| *t).collect();
    assert!(
        trusted.is_empty(),
        "trusted versions (any role with CREATE could install them): {trusted:?}"
    );
}

/// Each break, alone in a transaction that is rolled back, is found by the lint, and
/// nothing else is.
#[test]
fn the_lint_finds_each_thing_broken_on_purpose() {
    let base: String = connect()
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    let db = format!("{base}_lint");
    let dsn = fresh_database(&db);
    install(&dsn);
    let mut c = connect_to(&dsn);
    assert_eq!(
        lint(&mut c),
        Vec::<String>::new(),
        "a fresh install is clean"
    );

    let api = api_schema(&mut c);
    let policies = signature(&mut c, &api, "idem_policies");
    let metrics = signature(&mut c, &api, "idem_metrics");
    let begin = signature(&mut c, &api, "idem_begin");
    let unpinned = format!("{STORAGE}._idem_unpinned()");
    let mut breaks: Vec<(String, Vec<String>)> = vec![
        (
            format!("ALTER FUNCTION {policies} RESET search_path"),
            vec![format!("{policies}: search_path not pinned")],
        ),
        (
            // Pinned, but without pg_temp last the temp schema is searched first.
            format!("ALTER FUNCTION {metrics} SET search_path = pg_catalog, {STORAGE}"),
            vec![format!("{metrics}: search_path not pinned")],
        ),
        (
            format!("GRANT EXECUTE ON FUNCTION {begin} TO PUBLIC"),
            vec![format!(
                "{begin}: SECURITY DEFINER and executable by PUBLIC"
            )],
        ),
    ];
    match backend() {
        Backend::Extension => breaks.push((
            // A member written in SQL without a pinned path.
            format!(
                "CREATE FUNCTION {unpinned} RETURNS int LANGUAGE sql AS 'SELECT 1'; \
                 ALTER EXTENSION pg_idempotency ADD FUNCTION {unpinned}"
            ),
            vec![format!("{unpinned}: search_path not pinned")],
        )),
        Backend::Portable => {
            let caller = signature(&mut c, STORAGE, "_idem_caller");
            breaks.push((
                format!(
                    "CREATE FUNCTION {api}.idem_unpinned() RETURNS int LANGUAGE sql AS 'SELECT 1'"
                ),
                vec![format!("idem_unpinned(): search_path not pinned")],
            ));
            breaks.push((
                format!("ALTER FUNCTION {caller} SECURITY DEFINER"),
                // Not PUBLIC's as well: the install revokes EXECUTE on the helpers.
                vec![format!("{caller}: search_path not pinned")],
            ));
            // Once another role may use the storage schema, no helper is out of its reach.
            let helpers: Vec<String> = c
                .query(
                    "SELECT p.oid::regprocedure::text || ': search_path not pinned' \
                     FROM pg_proc p WHERE p.pronamespace = $1::text::regnamespace \
                       AND p.proname LIKE '\\_idem\\_%' AND p.proconfig IS NULL ORDER BY 1",
                    &[&STORAGE],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            assert!(helpers.len() > 10, "portable helpers: {helpers:?}");
            breaks.push((
                format!("GRANT USAGE ON SCHEMA {STORAGE} TO idempotency_user"),
                helpers,
            ));
        }
    }

    for (sql, mut expected) in breaks {
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut found = lint(&mut tx);
        tx.rollback().unwrap();
        found.sort();
        expected.sort();
        assert_eq!(found, expected, "after {sql}");
    }
    assert_eq!(
        lint(&mut c),
        Vec::<String>::new(),
        "rolled back: clean again"
    );
    drop(c);
    drop_database(&db);
}
