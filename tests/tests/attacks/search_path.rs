//! Attacks through the caller's search_path: a hostile schema placed first with its own
//! operators, functions and aggregates, and temp tables, types and domains named like ours
//! with pg_temp placed first. Our functions run as their definer, so any of these reached
//! from inside them would run attacker code with the definer's rights. Each test first
//! shows that the hostile objects really are in the way of unqualified SQL in the
//! caller's session, then runs the API and asserts correct results and an empty canary.

use std::time::{Duration, SystemTime};

use pg_idempotency_tests::attack::{Canary, TestRole};
use pg_idempotency_tests::*;

/// A database of this test's own with the backend under test installed; dropped at the end.
struct TestDb {
    name: String,
    dsn: String,
}

impl TestDb {
    fn new(job: &str) -> TestDb {
        let suffix = match backend() {
            Backend::Extension => "ext",
            Backend::Portable => "port",
        };
        let name = format!("pidem_atk1_{job}_{suffix}");
        let dsn = fresh_database(&name);
        install(&dsn);
        TestDb { name, dsn }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        drop_database(&self.name);
    }
}

/// Hostile operators: (operator, left type, right type, result type, the pg_catalog
/// function that does the real work).
const OPERATORS: &[(&str, &str, &str, &str, &str)] = &[
    ("=", "text", "text", "boolean", "texteq"),
    ("=", "bigint", "bigint", "boolean", "int8eq"),
    ("=", "integer", "integer", "boolean", "int4eq"),
    ("=", "bytea", "bytea", "boolean", "byteaeq"),
    ("=", "regrole", "regrole", "boolean", "oideq"),
    ("=", "tid", "tid", "boolean", "tideq"),
    ("=", "jsonb", "jsonb", "boolean", "jsonb_eq"),
    (
        "=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "timestamptz_eq",
    ),
    (
        "<",
        "timestamptz",
        "timestamptz",
        "boolean",
        "timestamptz_lt",
    ),
    (
        "<=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "timestamptz_le",
    ),
    (
        ">",
        "timestamptz",
        "timestamptz",
        "boolean",
        "timestamptz_gt",
    ),
    (
        ">=",
        "timestamptz",
        "timestamptz",
        "boolean",
        "timestamptz_ge",
    ),
    ("<", "text", "text", "boolean", "text_lt"),
    ("<", "bigint", "bigint", "boolean", "int8lt"),
    (">", "bigint", "bigint", "boolean", "int8gt"),
    (">", "tid", "tid", "boolean", "tidgt"),
    (
        "+",
        "timestamptz",
        "interval",
        "timestamptz",
        "timestamptz_pl_interval",
    ),
    (
        "-",
        "timestamptz",
        "timestamptz",
        "interval",
        "timestamptz_mi",
    ),
    ("+", "integer", "integer", "integer", "int4pl"),
    ("+", "bigint", "bigint", "bigint", "int8pl"),
    ("||", "text", "text", "text", "textcat"),
    ("||", "bytea", "bytea", "bytea", "byteacat"),
    ("||", "jsonb", "jsonb", "jsonb", "jsonb_concat"),
    ("->", "jsonb", "text", "jsonb", "jsonb_object_field"),
    ("->>", "jsonb", "text", "text", "jsonb_object_field_text"),
    ("->", "jsonb", "integer", "jsonb", "jsonb_array_element"),
    ("?", "jsonb", "text", "boolean", "jsonb_exists"),
    ("@>", "jsonb", "jsonb", "boolean", "jsonb_contains"),
    ("~", "text", "text", "boolean", "textregexeq"),
];

/// Hostile functions with the exact signature of pg_catalog's: (name, argument types,
/// result type). Each writes the canary, then returns what pg_catalog's would.
const FUNCTIONS: &[(&str, &[&str], &str)] = &[
    ("lower", &["text"], "text"),
    ("upper", &["text"], "text"),
    ("now", &[], "timestamptz"),
    ("clock_timestamp", &[], "timestamptz"),
    ("statement_timestamp", &[], "timestamptz"),
    ("transaction_timestamp", &[], "timestamptz"),
    ("nextval", &["regclass"], "bigint"),
    ("currval", &["regclass"], "bigint"),
    ("sha256", &["bytea"], "bytea"),
    ("convert_to", &["text", "name"], "bytea"),
    ("convert_from", &["bytea", "name"], "text"),
    ("encode", &["bytea", "text"], "text"),
    ("decode", &["text", "text"], "bytea"),
    ("gen_random_uuid", &[], "uuid"),
    ("random", &[], "double precision"),
    ("length", &["text"], "integer"),
    ("length", &["bytea"], "integer"),
    ("octet_length", &["text"], "integer"),
    ("octet_length", &["bytea"], "integer"),
    ("format", &["text"], "text"),
    ("format", &["text", "text"], "text"),
    ("format", &["text", "text", "text"], "text"),
    ("concat", &["text", "text"], "text"),
    ("jsonb_typeof", &["jsonb"], "text"),
    ("jsonb_each", &["jsonb"], "TABLE (key text, value jsonb)"),
    ("jsonb_object_keys", &["jsonb"], "SETOF text"),
    ("jsonb_array_elements", &["jsonb"], "SETOF jsonb"),
    ("jsonb_array_length", &["jsonb"], "integer"),
    ("current_setting", &["text"], "text"),
    ("current_setting", &["text", "boolean"], "text"),
    ("set_config", &["text", "text", "boolean"], "text"),
    ("pg_has_role", &["name", "name", "text"], "boolean"),
    ("pg_has_role", &["oid", "name", "text"], "boolean"),
    ("to_regrole", &["text"], "regrole"),
    ("quote_ident", &["text"], "text"),
    ("md5", &["text"], "text"),
    ("regexp_match", &["text", "text"], "text[]"),
    ("isfinite", &["interval"], "boolean"),
    ("date_part", &["text", "interval"], "double precision"),
    ("pg_advisory_xact_lock", &["bigint"], "void"),
];

/// Hostile aggregates: (name, argument, CREATE AGGREGATE body). Their state functions
/// (`<schema>.agg_<name>`) write the canary.
const AGGREGATES: &[(&str, &str, &str, &str)] = &[
    // (name, argument list, state function arguments, state function body)
    ("count", "*", "s bigint", "RETURN pg_catalog.int8inc(s);"),
    (
        "min",
        "timestamptz",
        "s timestamptz, v timestamptz",
        "RETURN pg_catalog.timestamptz_smaller(s, v);",
    ),
    (
        "max",
        "bigint",
        "s bigint, v bigint",
        "RETURN pg_catalog.int8larger(s, v);",
    ),
];

fn op_label(op: &str, l: &str, r: &str) -> String {
    format!("operator {op} ({l}, {r})")
}

fn fn_label(name: &str, args: &[&str]) -> String {
    format!("function {name}({})", args.join(", "))
}

/// Creates schema `evil` in the caller's own session (the attacker is the caller) with
/// every hostile object above, and returns the canary label of each.
fn plant_hostile_schema(c: &mut Client, canary: &Canary) -> Vec<String> {
    let mut sql = String::from("CREATE SCHEMA evil;\n");
    let mut labels = Vec::new();
    for (i, (op, l, r, ret, real)) in OPERATORS.iter().enumerate() {
        let label = op_label(op, l, r);
        sql.push_str(&format!(
            "CREATE FUNCTION evil.op_{i}(a {l}, b {r}) RETURNS {ret} LANGUAGE plpgsql AS \
             $h$ BEGIN {}; RETURN pg_catalog.{real}(a, b); END $h$;\n\
             CREATE OPERATOR evil.{op} (LEFTARG = {l}, RIGHTARG = {r}, FUNCTION = evil.op_{i});\n",
            canary.hit(&label)
        ));
        labels.push(label);
    }
    for (name, args, ret) in FUNCTIONS {
        let label = fn_label(name, args);
        let params: Vec<String> = args
            .iter()
            .enumerate()
            .map(|(i, t)| format!("a{i} {t}"))
            .collect();
        let call_args: Vec<String> = (0..args.len()).map(|i| format!("a{i}")).collect();
        let call = format!("pg_catalog.{name}({})", call_args.join(", "));
        let body = if ret.starts_with("SETOF") || ret.starts_with("TABLE") {
            format!("RETURN QUERY SELECT * FROM {call};")
        } else if *ret == "void" {
            format!("PERFORM {call};")
        } else {
            format!("RETURN {call};")
        };
        sql.push_str(&format!(
            "CREATE FUNCTION evil.{name}({}) RETURNS {ret} LANGUAGE plpgsql AS \
             $h$ BEGIN {}; {body} END $h$;\n",
            params.join(", "),
            canary.hit(&label)
        ));
        labels.push(label);
    }
    for (name, arg, sfunc_args, body) in AGGREGATES {
        let label = format!("aggregate {name}({arg})");
        let state = sfunc_args.split(", ").next().unwrap_or("s bigint");
        let stype = state.trim_start_matches("s ");
        sql.push_str(&format!(
            "CREATE FUNCTION evil.agg_{name}({sfunc_args}) RETURNS {stype} LANGUAGE plpgsql AS \
             $h$ BEGIN {}; {body} END $h$;\n\
             CREATE AGGREGATE evil.{name}({arg}) (SFUNC = evil.agg_{name}, STYPE = {stype}{});\n",
            canary.hit(&label),
            if *name == "count" {
                ", INITCOND = '0'"
            } else {
                ""
            }
        ));
        labels.push(label);
    }
    c.batch_execute(&sql)
        .unwrap_or_else(|e| panic!("planting the hostile schema: {e}"));
    labels
}

/// One unqualified use of every hostile object, with arguments of the exact types.
fn probe_hostile_schema(c: &mut Client) {
    for (op, l, r, _, _) in OPERATORS {
        c.batch_execute(&format!("SELECT NULL::{l} {op} NULL::{r}"))
            .unwrap_or_else(|e| panic!("probe {op}: {e}"));
    }
    for (name, args, ret) in FUNCTIONS {
        let args: Vec<String> = args.iter().map(|t| format!("NULL::{t}")).collect();
        let args = if *name == "set_config" {
            "'application_name', 'probe', true".to_string()
        } else {
            args.join(", ")
        };
        let sql = if ret.starts_with("SETOF") || ret.starts_with("TABLE") {
            format!("SELECT * FROM {name}({args})")
        } else {
            format!("SELECT {name}({args})")
        };
        c.batch_execute(&sql)
            .unwrap_or_else(|e| panic!("probe {sql}: {e}"));
    }
    c.batch_execute(
        "SELECT count(*) FROM (VALUES (1)) v; \
         SELECT min(NULL::timestamptz); SELECT max(NULL::bigint)",
    )
    .unwrap_or_else(|e| panic!("probe aggregates: {e}"));
}

/// A login session of `role` whose search_path puts `evil` first, before pg_catalog, after
/// showing that every hostile object is what unqualified SQL reaches there. The canary is
/// emptied afterwards (by the superuser `admin`), so what it holds later came from the API.
fn hostile_session(db: &TestDb, role: &TestRole, canary: &Canary, admin: &mut Client) -> Client {
    admin
        .batch_execute(&format!(
            "GRANT CREATE ON DATABASE {} TO {}",
            db.name,
            role.ident()
        ))
        .unwrap();
    let mut c = role.login();
    let labels = plant_hostile_schema(&mut c, canary);
    c.batch_execute("SET search_path = evil, pg_catalog, public")
        .unwrap();
    probe_hostile_schema(&mut c);
    let mut hits = canary.hits(admin);
    hits.sort();
    hits.dedup();
    let mut expected = labels;
    expected.sort();
    assert_eq!(
        hits, expected,
        "some hostile object is not in the way of unqualified SQL, so it would prove nothing"
    );
    admin
        .batch_execute(&format!("DELETE FROM {}.hits", canary.schema))
        .unwrap();
    c
}

/// What `idem_begin` answered, read without any operator or unqualified type name.
#[derive(Debug)]
struct Began {
    outcome: String,
    fence: Option<i64>,
    attempt: i32,
    response: Option<String>,
    lease_until: Option<SystemTime>,
}

fn begin(
    c: &mut Client,
    scope: &str,
    key: Option<&str>,
    request: Option<&str>,
) -> Result<Began, postgres::Error> {
    let row = c.query_one(
        "SELECT outcome, fence, attempt, response::pg_catalog.text, lease_until \
         FROM idem_begin($1, $2, $3::pg_catalog.text::pg_catalog.jsonb)",
        &[&scope, &key, &request],
    )?;
    Ok(Began {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        response: row.get(3),
        lease_until: row.get(4),
    })
}

fn complete(
    c: &mut Client,
    scope: &str,
    key: &str,
    fence: i64,
    response: &str,
) -> Result<String, postgres::Error> {
    c.query_one(
        "SELECT state FROM idem_complete($1, $2, $3, $4::pg_catalog.text::pg_catalog.jsonb)",
        &[&scope, &key, &fence, &response],
    )
    .map(|r| r.get(0))
}

/// The HASH_INPUT key of `request`, computed by the superuser's clean session.
fn hash_key(admin: &mut Client, request: &str) -> String {
    admin
        .query_one(
            "SELECT encode(idem_hash($1::text::jsonb), 'hex')",
            &[&request],
        )
        .unwrap()
        .get(0)
}

/// The stored row of (scope, key), read by the superuser: state, fence, response.
fn stored(admin: &mut Client, scope: &str, key: &str) -> Vec<(String, i64, Option<String>)> {
    admin
        .query(
            "SELECT state, fence, response::text FROM idempotency.records \
             WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Every API function an ordinary role may call, with its results checked (forget and
/// metrics are the 0.2.0 grants to idempotency_user: a test of their own below).
fn exercise_user_api(c: &mut Client, admin: &mut Client, role: &TestRole) {
    let scope = "hijack";
    let request = r#"{"b": [true, null], "a": 1}"#;
    let key = hash_key(admin, request);

    // A NULL key with a request: the key is the request's hash.
    let first = begin(c, scope, None, Some(request)).unwrap();
    assert_eq!((first.outcome.as_str(), first.attempt), ("claimed", 1));
    let fence = first.fence.expect("a claim has a fence");
    assert_eq!(
        stored(admin, scope, &key),
        vec![("in_progress".into(), fence, None)]
    );
    let seen = c
        .query(
            "SELECT state, fence, fingerprint, owner::pg_catalog.text FROM idem_lookup($1, $2)",
            &[&scope, &key],
        )
        .unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].get::<_, String>(0), "in_progress");
    assert_eq!(seen[0].get::<_, i64>(1), fence);
    let fingerprint: Vec<u8> = admin
        .query_one("SELECT idem_hash($1::text::jsonb)", &[&request])
        .unwrap()
        .get(0);
    assert_eq!(seen[0].get::<_, Vec<u8>>(2), fingerprint);
    assert_eq!(seen[0].get::<_, String>(3), role.name);

    // A duplicate while it runs; a different request under the key.
    let dup = begin(c, scope, Some(&key), Some(request)).unwrap();
    assert_eq!((dup.outcome.as_str(), dup.fence), ("in_progress", None));
    let other = begin(c, scope, Some(&key), Some(r#"{"a": 2}"#)).unwrap_err();
    assert_eq!(sqlstate(&other), "IK001");

    // A heartbeat pushes the lease out (default lease 60 s; asked: 10 minutes).
    let lease: SystemTime = c
        .query_one(
            "SELECT lease_until FROM idem_extend($1, $2, $3, '10 minutes')",
            &[&scope, &key, &fence],
        )
        .unwrap()
        .get(0);
    let before = first.lease_until.unwrap();
    assert!(
        lease > before + Duration::from_secs(300),
        "lease not extended"
    );

    // Completion, a wrong fence, and the replay.
    let wrong = complete(c, scope, &key, fence + 1000, "{}").unwrap_err();
    assert_eq!(sqlstate(&wrong), "IK003");
    assert_eq!(
        complete(c, scope, &key, fence, r#"{"ok": true}"#).unwrap(),
        "succeeded"
    );
    let replay = begin(c, scope, None, Some(request)).unwrap();
    assert_eq!(replay.outcome, "replay");
    assert_eq!(replay.response.as_deref(), Some(r#"{"ok": true}"#));
    assert_eq!(
        stored(admin, scope, &key),
        vec![("succeeded".into(), fence, Some(r#"{"ok": true}"#.into()))]
    );

    // Release: the next begin claims again with a new fence.
    let held = begin(c, scope, Some("released"), None).unwrap();
    let held_fence = held.fence.unwrap();
    c.execute(
        "SELECT idem_release($1, 'released', $2)",
        &[&scope, &held_fence],
    )
    .unwrap();
    let again = begin(c, scope, Some("released"), None).unwrap();
    assert_eq!(again.outcome, "claimed");
    assert!(again.fence.unwrap() > held_fence);

    // Absent keys, canonical form and hash, policies.
    let absent = c
        .query("SELECT state FROM idem_lookup($1, 'absent')", &[&scope])
        .unwrap();
    assert!(absent.is_empty());
    let canonical: String = c
        .query_one(
            "SELECT idem_canonical($1::pg_catalog.text::pg_catalog.jsonb)",
            &[&request],
        )
        .unwrap()
        .get(0);
    assert_eq!(canonical, r#"{"a":1,"b":[true,null]}"#);
    let hash: Vec<u8> = c
        .query_one(
            "SELECT idem_hash($1::pg_catalog.text::pg_catalog.jsonb)",
            &[&request],
        )
        .unwrap()
        .get(0);
    assert_eq!(hash, fingerprint);
    let policies: Vec<(String, String)> = c
        .query(
            "SELECT scope, ttl::pg_catalog.text FROM idem_policies()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(policies, vec![("policed".into(), "02:00:00".into())]);
}

/// forget and metrics, granted to idempotency_user in 0.2.0, on the caller's own record.
fn exercise_user_forget_and_metrics(c: &mut Client, admin: &mut Client) {
    let scope = "hijack-own";
    let claim = begin(c, scope, Some("k"), None).unwrap();
    assert_eq!(claim.outcome, "claimed");
    let counts: Vec<(String, i64)> = c
        .query("SELECT scope, in_progress FROM idem_metrics()", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(counts, vec![(scope.to_string(), 1)]);
    let forgot: bool = c
        .query_one("SELECT idem_forget($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert!(forgot);
    assert!(stored(admin, scope, "k").is_empty());
}

/// The admin-only functions, as a member of idempotency_admin.
fn exercise_admin_api(c: &mut Client, admin: &mut Client) {
    let scope = "hijack-admin";
    let ttl: String = c
        .query_one(
            "SELECT ttl::pg_catalog.text FROM idem_set_policy($1, ttl => '2 hours')",
            &[&scope],
        )
        .unwrap()
        .get(0);
    assert_eq!(ttl, "02:00:00");
    let claim = begin(c, scope, Some("k"), None).unwrap();
    assert_eq!(claim.outcome, "claimed");
    let stored_ttl: String = admin
        .query_one(
            "SELECT ttl::text FROM idempotency.records WHERE scope = $1",
            &[&scope],
        )
        .unwrap()
        .get(0);
    assert_eq!(stored_ttl, "02:00:00", "the policy's ttl was not applied");
    let dropped: bool = c
        .query_one("SELECT idem_drop_policy($1)", &[&scope])
        .unwrap()
        .get(0);
    assert!(dropped);
    let scopes: Vec<String> = c
        .query("SELECT scope FROM idem_metrics()", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(scopes.contains(&scope.to_string()), "{scopes:?}");
    // One expired record (made so by the superuser) for the purge to find.
    begin(c, scope, Some("old"), None).unwrap();
    admin
        .execute(
            "UPDATE idempotency.records SET lease_until = NULL, state = 'succeeded', \
             expires_at = clock_timestamp() - interval '1 minute', unresolved_until = NULL \
             WHERE key = 'old'",
            &[],
        )
        .unwrap();
    let purged: i64 = c
        .query_one("SELECT idem_purge_expired()", &[])
        .unwrap()
        .get(0);
    assert_eq!(purged, 1);
    let forgot: bool = c
        .query_one("SELECT idem_forget($1, 'k')", &[&scope])
        .unwrap()
        .get(0);
    assert!(forgot);
    assert!(stored(admin, scope, "k").is_empty());
}

/// A policy set beforehand by the superuser, for idem_policies to show.
fn set_policy(admin: &mut Client) {
    admin
        .batch_execute("SELECT idem_set_policy('policed', ttl => '2 hours')")
        .unwrap();
}

#[test]
fn a_hostile_schema_first_on_the_path_is_not_used_by_the_user_api() {
    let db = TestDb::new("path_user");
    let mut admin = connect_to(&db.dsn);
    set_policy(&mut admin);
    let canary = Canary::create(&mut admin, "atk1");
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = hostile_session(&db, &user, &canary, &mut admin);
    exercise_user_api(&mut c, &mut admin, &user);
    canary.assert_empty(&mut admin);
}

#[test]
fn a_hostile_schema_first_on_the_path_is_not_used_by_forget_and_metrics() {
    let db = TestDb::new("path_forget");
    let mut admin = connect_to(&db.dsn);
    let canary = Canary::create(&mut admin, "atk1");
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = hostile_session(&db, &user, &canary, &mut admin);
    exercise_user_forget_and_metrics(&mut c, &mut admin);
    canary.assert_empty(&mut admin);
}

#[test]
fn a_hostile_schema_first_on_the_path_is_not_used_by_the_admin_api() {
    let db = TestDb::new("path_admin");
    let mut admin = connect_to(&db.dsn);
    let canary = Canary::create(&mut admin, "atk1");
    let ops = TestRole::create(&db.dsn, "atk1_ops", "IN ROLE idempotency_admin");
    let mut c = hostile_session(&db, &ops, &canary, &mut admin);
    exercise_admin_api(&mut c, &mut admin);
    canary.assert_empty(&mut admin);
}

/// Type names an unqualified cast can reach through the path (SQL keywords such as
/// integer, bigint, boolean, interval, and json from PostgreSQL 16 on, always mean
/// pg_catalog's).
const SHADOWED_TYPES: &[(&str, &str)] = &[
    ("text", "'x'"),
    ("jsonb", "'{}'"),
    ("bytea", "'\\x00'"),
    ("uuid", "'00000000-0000-0000-0000-000000000000'"),
    ("regrole", "'postgres'"),
    ("regclass", "'pg_class'"),
    ("timestamptz", "'2000-01-01'"),
    ("int8", "'1'"),
    ("int4", "'1'"),
    ("bool", "'t'"),
    ("float8", "'1'"),
    ("name", "'x'"),
    ("oid", "'1'"),
    ("tid", "'(0,1)'"),
];

/// Our storage's and result types' names, as temp tables (with triggers that write the
/// canary and rows that would change results if read) and temp composite types.
fn plant_temp_shadows(c: &mut Client, canary: &Canary) {
    let k = &canary.schema;
    let mut sql = format!(
        "CREATE TEMP TABLE records (scope text, key text, state text, fence bigint, \
           attempt int, fingerprint bytea, upstream_key uuid, response jsonb, \
           created_at timestamptz, completed_at timestamptz, lease_until timestamptz, \
           expires_at timestamptz, ttl interval, owner regrole);
         INSERT INTO records VALUES ('shadow', 'k', 'succeeded', 1, 1, NULL, \
           gen_random_uuid(), '{{\"evil\": true}}', now(), now(), NULL, \
           now() + interval '1 day', interval '1 day', current_user::regrole);
         CREATE TEMP TABLE policies (scope text, ttl interval, lease interval, \
           on_cache_hit text, cache_failures boolean, on_mismatch text, \
           updated_at timestamptz, updated_by regrole);
         INSERT INTO policies VALUES ('shadow', '1 second', '1 second', 'fail_fast', true, \
           'ignore', now(), current_user::regrole);
         CREATE TEMP TABLE settings (name text, value text);
         INSERT INTO settings VALUES ('max_key_bytes', '1'), ('max_ttl', '1');
         CREATE TEMP TABLE installed (version text, installed_at timestamptz);
         INSERT INTO installed VALUES ('evil', now());
         CREATE TEMP SEQUENCE fence_seq START 1000000000;
         CREATE FUNCTION pg_temp.hit(what text) RETURNS boolean LANGUAGE plpgsql AS
           $h$ BEGIN INSERT INTO {k}.hits (what) VALUES (what); RETURN true; END $h$;
         CREATE FUNCTION pg_temp.trg() RETURNS trigger LANGUAGE plpgsql AS
           $h$ BEGIN INSERT INTO {k}.hits (what) VALUES ('trigger ' || TG_TABLE_NAME || ' ' || TG_OP);
                    RETURN NULL; END $h$;\n"
    );
    for table in ["records", "policies", "settings", "installed"] {
        sql.push_str(&format!(
            "CREATE TRIGGER row_hit BEFORE INSERT OR UPDATE OR DELETE ON pg_temp.{table} \
               FOR EACH ROW EXECUTE FUNCTION pg_temp.trg();
             CREATE TRIGGER truncate_hit BEFORE TRUNCATE ON pg_temp.{table} \
               FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.trg();\n"
        ));
    }
    for result in [
        "begin_result",
        "complete_result",
        "extend_result",
        "lookup_result",
    ] {
        sql.push_str(&format!(
            "CREATE TYPE pg_temp.{result} AS (evil integer);\n"
        ));
    }
    // Last: from here on, these names mean the domains in this session.
    for (name, _) in SHADOWED_TYPES {
        sql.push_str(&format!(
            "CREATE DOMAIN pg_temp.{name} AS pg_catalog.{name} \
               CHECK (pg_temp.hit('domain {name}'));\n"
        ));
    }
    c.batch_execute(&sql)
        .unwrap_or_else(|e| panic!("planting temp shadows: {e}"));
}

/// What the caller's temp objects hold, to show that nothing wrote to them.
fn temp_contents(c: &mut Client) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["records", "policies", "settings", "installed"] {
        let rows = c
            .query(
                &format!("SELECT (t.*)::pg_catalog.text FROM pg_temp.{table} t"),
                &[],
            )
            .unwrap();
        out.extend(
            rows.iter()
                .map(|r| format!("{table} {}", r.get::<_, String>(0))),
        );
    }
    let called: bool = c
        .query_one("SELECT is_called FROM pg_temp.fence_seq", &[])
        .unwrap()
        .get(0);
    out.push(format!("fence_seq called {called}"));
    out
}

#[test]
fn temp_tables_and_types_named_like_ours_are_not_used() {
    let db = TestDb::new("temp");
    let mut admin = connect_to(&db.dsn);
    set_policy(&mut admin);
    let canary = Canary::create(&mut admin, "atk1");
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = user.login();
    plant_temp_shadows(&mut c, &canary);
    c.batch_execute("SET search_path = pg_temp, pg_catalog, public")
        .unwrap();

    // In this session, the unqualified names are the temp objects.
    let shadow_rows: i64 = c
        .query_one(
            "SELECT count(*) FROM records WHERE scope OPERATOR(pg_catalog.=) 'shadow'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(shadow_rows, 1);
    for (name, sample) in SHADOWED_TYPES {
        c.batch_execute(&format!("SELECT {sample}::{name}"))
            .unwrap_or_else(|e| panic!("probe {name}: {e}"));
    }
    c.batch_execute("INSERT INTO records (scope) VALUES ('probe')")
        .unwrap();
    let mut hits = canary.hits(&mut admin);
    hits.sort();
    let mut expected: Vec<String> = SHADOWED_TYPES
        .iter()
        .map(|(n, _)| format!("domain {n}"))
        .collect();
    expected.push("trigger records INSERT".into());
    expected.sort();
    assert_eq!(hits, expected, "a temp shadow is not in the way");
    admin
        .batch_execute(&format!("DELETE FROM {}.hits", canary.schema))
        .unwrap();
    let temp_before = temp_contents(&mut c);
    canary.assert_empty(&mut admin);

    // The scope 'shadow' has a temp record and policy that would change results if read.
    let claim = begin(&mut c, "shadow", Some("k"), None).unwrap();
    assert_eq!(claim.outcome, "claimed", "the temp record was read");
    assert!(
        claim.fence.unwrap() < 1_000_000_000,
        "the temp sequence was used"
    );
    complete(&mut c, "shadow", "k", claim.fence.unwrap(), "{}").unwrap();
    let replay = begin(&mut c, "shadow", Some("k"), None).unwrap();
    assert_eq!(
        replay.outcome, "replay",
        "the temp policy (fail_fast) was read"
    );
    assert_eq!(
        stored(&mut admin, "shadow", "k"),
        vec![("succeeded".into(), claim.fence.unwrap(), Some("{}".into()))]
    );
    exercise_user_api(&mut c, &mut admin, &user);
    assert_eq!(temp_contents(&mut c), temp_before);
    canary.assert_empty(&mut admin);
}

#[test]
fn temp_shadows_are_not_used_by_forget_and_metrics() {
    let db = TestDb::new("temp_forget");
    let mut admin = connect_to(&db.dsn);
    let canary = Canary::create(&mut admin, "atk1");
    let user = TestRole::create(&db.dsn, "atk1_user", "IN ROLE idempotency_user");
    let mut c = user.login();
    plant_temp_shadows(&mut c, &canary);
    c.batch_execute("SET search_path = pg_temp, pg_catalog, public")
        .unwrap();
    let temp_before = temp_contents(&mut c);
    exercise_user_forget_and_metrics(&mut c, &mut admin);
    assert_eq!(temp_contents(&mut c), temp_before);
    canary.assert_empty(&mut admin);
}
