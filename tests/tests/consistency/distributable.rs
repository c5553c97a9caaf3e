//! DESIGN 8: every statement the backend under test runs on its tables keeps to what a
//! distributed engine (Citus) accepts. The statements are not read from the sources but
//! caught as the server runs them: a server of its own logs every statement with
//! auto_explain (nested ones too: the extension's SPI calls, the PL/pgSQL bodies) while a
//! session goes through every path of the API, and each caught statement is checked:
//!
//! - no advisory lock anywhere (they are per node on a distributed engine);
//! - in an UPDATE or DELETE, and in an INSERT's ON CONFLICT and RETURNING parts, no call
//!   of a volatile or stable function (the clock, a sequence, a random uuid, a setting):
//!   the values are computed before the statement and passed in;
//! - for the extension's C code, the tables named with their schema (its SQL and PL/pgSQL
//!   helpers, like every function of the portable variant, pin their search_path instead,
//!   DESIGN 7).

use pg_idempotency_tests::*;

/// Calls that Citus would have to evaluate per row inside a distributed write.
const FORBIDDEN: &[&str] = &[
    "clock_timestamp(",
    "statement_timestamp(",
    "transaction_timestamp(",
    "now(",
    "current_timestamp",
    "localtimestamp",
    "nextval(",
    "gen_random_uuid(",
    "random(",
    "current_setting(",
    "txid_current(",
];

const TABLES: &[&str] = &["records", "policies"];

/// A statement caught in the log, and whether it ran inside a SQL or PL/pgSQL function.
struct Caught {
    text: String,
    in_function: bool,
}

/// Every "Query Text" auto_explain logged (JSON format), decoded, with whether the entry's
/// CONTEXT names a SQL or PL/pgSQL function (the entry ends where the next LOG line starts).
fn caught(log: &str) -> Vec<Caught> {
    let mut out = Vec::new();
    let marker = "\"Query Text\": ";
    let mut rest = log;
    while let Some(at) = rest.find(marker) {
        rest = &rest[at + marker.len()..];
        let entry = &rest[..rest.find(" LOG:  ").unwrap_or(rest.len())];
        let context = entry.find(" CONTEXT:  ").map_or("", |i| &entry[i..]);
        let in_function =
            context.contains("PL/pgSQL function ") || context.contains("SQL function \"");
        let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        if let Some(Ok(text)) = de.next() {
            out.push(Caught { text, in_function });
        }
    }
    out
}

fn mentions_table(stmt: &str) -> bool {
    let lower = stmt.to_lowercase();
    TABLES.iter().any(|t| {
        lower.match_indices(t).any(|(i, _)| {
            let before = lower[..i].chars().last().unwrap_or(' ');
            let after = lower[i + t.len()..].chars().next().unwrap_or(' ');
            !(before.is_alphanumeric() || before == '_')
                && !(after.is_alphanumeric() || after == '_')
        })
    })
}

/// The parts of a write that run per row on the node of a distributed table.
fn per_row_parts(stmt: &str) -> Vec<String> {
    let lower = stmt.to_lowercase();
    let verb = lower
        .trim_start()
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    let mut parts = Vec::new();
    match verb.as_str() {
        "update" | "delete" => parts.push(lower.clone()),
        "insert" => {
            if let Some(i) = lower.find("on conflict") {
                parts.push(lower[i..].to_string());
            } else if let Some(i) = lower.find("returning") {
                parts.push(lower[i..].to_string());
            }
        }
        // A data-modifying CTE: the whole statement.
        "with"
            if ["update ", "delete ", "insert "]
                .iter()
                .any(|w| lower.contains(w)) =>
        {
            parts.push(lower.clone())
        }
        _ => {}
    }
    parts
}

/// The problems of one statement, as lines.
fn problems(stmt: &str, named_schema: bool) -> Vec<String> {
    let mut found = Vec::new();
    let lower = stmt.to_lowercase();
    if lower.contains("pg_advisory") {
        found.push("takes an advisory lock".to_string());
    }
    if !mentions_table(stmt) {
        return found;
    }
    for part in per_row_parts(stmt) {
        for f in FORBIDDEN {
            if part.contains(f) {
                found.push(format!("calls {f}...) inside a distributed write"));
            }
        }
    }
    if named_schema {
        for t in TABLES {
            let bare = lower
                .match_indices(t)
                .filter(|(i, _)| {
                    let before = &lower[..*i];
                    let after = lower[i + t.len()..].chars().next().unwrap_or(' ');
                    let word_start = !before
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.');
                    let word_end = !(after.is_alphanumeric() || after == '_');
                    let table_position = ["from ", "into ", "update ", "join "]
                        .iter()
                        .any(|k| before.trim_end().ends_with(k.trim_end()));
                    word_start && word_end && table_position
                })
                .count();
            if bare > 0 {
                found.push(format!("names {t} without its schema"));
            }
        }
    }
    found
}

#[test]
fn the_checks_find_what_they_look_for() {
    let bad = "UPDATE idempotency.records r SET lease_until = clock_timestamp() WHERE r.key = $1";
    assert_eq!(
        problems(bad, true),
        vec!["calls clock_timestamp(...) inside a distributed write"]
    );
    let bad =
        "INSERT INTO idempotency.records (fence) VALUES ($1) ON CONFLICT (scope, key, owner) \
               DO UPDATE SET fence = nextval('idempotency.fence_seq')";
    assert_eq!(
        problems(bad, true),
        vec!["calls nextval(...) inside a distributed write"]
    );
    assert_eq!(
        problems("SELECT * FROM records WHERE key = $1", true),
        vec!["names records without its schema"]
    );
    assert!(problems("SELECT * FROM records WHERE key = $1", false).is_empty());
    assert_eq!(
        problems("SELECT pg_advisory_xact_lock(1)", false),
        vec!["takes an advisory lock"]
    );
    // Values computed before the statement are what the rule asks for.
    let good = "INSERT INTO idempotency.records (created_at, fence) VALUES ($1, $2) \
                ON CONFLICT (scope, key, owner) DO NOTHING RETURNING fence";
    assert!(problems(good, true).is_empty());
    assert!(problems("SELECT clock_timestamp()", true).is_empty());
}

/// Claim, duplicate, wait, complete, replay, extend, release, takeover, claim token, cached
/// and uncached failures, batches, forget, lookup, policies, metrics, hashing.
const SESSION: &str = "SELECT idem_set_policy('s', ttl => '1 hour', lease => '10 minutes');
     SELECT * FROM idem_begin('s', 'a', '{\"x\": 1}');
     SELECT * FROM idem_begin('s', 'a', '{\"x\": 1}');
     SELECT * FROM idem_begin('s', 'a', '{\"x\": 1}', wait => '50 ms');
     SELECT * FROM idem_extend('s', 'a', (SELECT fence FROM idem_lookup('s', 'a')), '5 minutes');
     SELECT * FROM idem_complete('s', 'a', (SELECT fence FROM idem_lookup('s', 'a')), '{\"ok\": 1}');
     SELECT * FROM idem_complete('s', 'a', (SELECT fence FROM idem_lookup('s', 'a')), '{\"ok\": 1}');
     SELECT * FROM idem_begin('s', 'a', '{\"x\": 1}');
     SELECT * FROM idem_begin('s', 'a', '{\"x\": 1}', on_cache_hit => 'return_cached_if_success');
     SELECT * FROM idem_begin('s', 'b', claim_token => '00000000-0000-0000-0000-000000000001');
     SELECT * FROM idem_begin('s', 'b', claim_token => '00000000-0000-0000-0000-000000000001');
     SELECT idem_release('s', 'b', (SELECT fence FROM idem_lookup('s', 'b')));
     SELECT * FROM idem_begin('s', 'c');
     SELECT * FROM idem_complete('s', 'c', (SELECT fence FROM idem_lookup('s', 'c')), '{}', false, true);
     SELECT * FROM idem_begin('s', 'c');
     SELECT * FROM idem_begin('s', 'd');
     SELECT * FROM idem_complete('s', 'd', (SELECT fence FROM idem_lookup('s', 'd')), '{}', false, false);
     SELECT * FROM idem_begin(scope => 's', key => NULL, request => '{\"y\": 2}');
     SELECT * FROM idem_begin_batch('s', ARRAY['f1', 'f2', 'a'], ARRAY[NULL, '{\"z\": 1}', NULL]::jsonb[]);
     SELECT * FROM idem_complete_batch('s', ARRAY['f1', 'f2'],
         ARRAY[(SELECT fence FROM idem_lookup('s', 'f1')), (SELECT fence FROM idem_lookup('s', 'f2'))],
         ARRAY['{\"ok\": 2}', '{\"ok\": 3}']::jsonb[], ARRAY[true, false]);
     SELECT idem_forget('s', 'a');
     SELECT * FROM idem_metrics();
     SELECT * FROM idem_policies();
     SELECT idem_drop_policy('s');
     SELECT idem_canonical('{\"b\": 1, \"a\": [2, 1.0]}'), idem_hash('{\"b\": 1}');
     SELECT * FROM idem_begin('t', 'e', ttl => '1 s', lease => '100 ms', unresolved_ttl => '1 s');";

/// A repeat of a completed call refused (an error, so run on its own).
const FAIL_FAST: &str = "SELECT * FROM idem_begin('s', 'a', on_cache_hit => 'fail_fast')";

/// After 't'/'e''s lease lapsed: the operator's view and decision, then a claim afresh.
const LAPSED: &str = "SELECT * FROM idem_unresolved();
     SELECT idem_resolve('t', 'e', (SELECT fence FROM idem_lookup('t', 'e')), 'in_progress', 'release');
     SELECT * FROM idem_resolutions();
     SELECT * FROM idem_begin('t', 'e', ttl => '1 s', lease => '100 ms', unresolved_ttl => '1 s');";

/// After 't'/'e' expired: the purge, whole and in batches.
const EXPIRED: &str = "SELECT idem_purge_expired(); SELECT idem_purge_expired(1);";

/// A function added to the API and left out of the session above would never have its
/// statements checked: every one is called there.
#[test]
fn the_session_calls_every_api_function() {
    let session = [SESSION, FAIL_FAST, LAPSED, EXPIRED].concat();
    let missing: Vec<&str> = pg_idempotency_protocol::functions::api()
        .map(|f| f.name)
        .filter(|name| !session.contains(&format!("{name}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "tests/tests/consistency/distributable.rs: add a call of {missing:?} to its session (SESSION, LAPSED or EXPIRED)"
    );
}

#[test]
fn every_statement_on_the_tables_keeps_to_the_rules_of_a_distributed_table() {
    let server = TempCluster::start(
        "distributable",
        &[
            "shared_preload_libraries = 'pg_idempotency'",
            "session_preload_libraries = 'auto_explain'",
            "auto_explain.log_min_duration = 0",
            "auto_explain.log_nested_statements = on",
            "auto_explain.log_format = json",
            "log_min_messages = log",
        ],
    );
    let dsn = server.dsn("postgres");
    let extension = backend() == Backend::Extension;
    install_backend(&dsn, backend());
    let mut c = connect_to(&dsn);
    let log_start = std::fs::read_to_string(server.log_path())
        .unwrap_or_default()
        .len();

    // Every path of the API (SESSION, LAPSED, EXPIRED): each statement batch is run as
    // written, so every call the check below finds in them was made.
    c.batch_execute(SESSION).unwrap();
    let _ = c.query(FAIL_FAST, &[]);
    wait_for_lapse(&mut c, "t", "e");
    c.batch_execute(LAPSED).unwrap();
    wait_for_expiry(&mut c, "t", &["e".to_string()]);
    c.batch_execute(EXPIRED).unwrap();
    drop(c);

    let log = std::fs::read_to_string(server.log_path()).unwrap();
    let statements = caught(&log[log_start..]);
    let on_tables: Vec<&String> = statements
        .iter()
        .map(|s| &s.text)
        .filter(|s| mentions_table(s))
        .collect();
    // The capture works: the writes of a claim, a completion and a purge were seen.
    for verb in ["insert", "update", "delete"] {
        assert!(
            on_tables
                .iter()
                .any(|s| s.to_lowercase().trim_start().starts_with(verb)
                    || s.to_lowercase().contains(&format!("{verb} "))),
            "no {verb} on the tables was caught among {} statements",
            statements.len()
        );
    }
    eprintln!(
        "{} statements caught, {} of them on the tables",
        statements.len(),
        on_tables.len()
    );
    // The extension's C code was caught too, so the schema rule had statements to check.
    assert!(
        !extension
            || statements
                .iter()
                .any(|s| !s.in_function && mentions_table(&s.text)),
        "no statement of the extension's C code on the tables was caught"
    );
    let mut report = Vec::new();
    for stmt in &statements {
        // The extension's C code sends its statements under the caller's search_path, so
        // they name the schema; its SQL and PL/pgSQL helpers pin theirs (the catalogue lint
        // checks that), as the portable variant's functions do.
        let named_schema = extension && !stmt.in_function;
        for p in problems(&stmt.text, named_schema) {
            report.push(format!("{p}:\n    {}", stmt.text.trim()));
        }
    }
    assert!(
        report.is_empty(),
        "{} of {} statements break DESIGN 8's rules:\n{}",
        report.len(),
        statements.len(),
        report.join("\n")
    );
}
