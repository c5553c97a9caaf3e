//! Hostile and odd text in scope, key, request and response: injection strings, LIKE and
//! regex metacharacters, format directives, quotes, dollar quotes and Unicode that looks
//! alike but is not the same (NFC/NFD, case, trailing space, invisible characters). Each
//! round-trips byte for byte, names exactly one call (never a pattern), and runs no code.

use pg_idempotency_tests::attack::{storage_picture, Canary, Db};
use pg_idempotency_tests::*;
use serde_json::{json, Value};

/// Strings that would do harm if any of them reached SQL as code or as a pattern, or that
/// a careless comparison would fold into another. `hit` is the canary's INSERT, so that
/// an injection which runs leaves a trace.
fn hostile(hit: &str) -> Vec<String> {
    let mut out: Vec<String> = [
        "'; DROP TABLE victim; --",
        "%",
        "_",
        "a%",
        "a_",
        "\\",
        "\\\\",
        "$1",
        "%s",
        "%I %L %%",
        "*",
        ".*",
        "^a$",
        "[a-z]",
        "a|b",
        "(?i)A",
        "\"",
        "'",
        "''",
        "$$",
        "$q$",
        "\u{e9}",      // é, NFC
        "e\u{301}",    // é, NFD: another call
        "\u{202e}cba", // right-to-left override
        "a\u{200d}b",  // zero-width joiner
        "a\u{a0}b",    // no-break space inside
        "\u{1f600}",   // astral (surrogate pair in UTF-16)
        "\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467}",
        "\u{10ffff}",
        "Key",
        "key",
        "KEY",
        "k",
        "k ",
        " k",
        "null",
        "NULL",
        "{}",
        "a\nb",
        "a\tb",
    ]
    .map(String::from)
    .to_vec();
    // Injection attempts whose payload is the canary's INSERT.
    out.push(format!("x'); {hit}; --"));
    out.push(format!("x$$; {hit}; $$"));
    out.push(format!("x\"; {hit}; --"));
    out.push(format!("x' || ({hit}) || '"));
    out
}

/// A request and a response that carry `s` as a value and as an object key.
fn request_of(s: &str) -> String {
    json!({"v": s, s: [s]}).to_string()
}

fn response_of(s: &str) -> String {
    json!({"echo": s, s: {"nested": s}}).to_string()
}

/// What the record of (scope, key) holds: its scope, key and response as stored.
fn lookup(c: &mut Client, scope: &str, key: &str) -> Vec<(String, String, Option<Value>)> {
    c.query(
        "SELECT scope, key, response::text FROM idem_lookup($1, $2)",
        &[&scope, &key],
    )
    .unwrap_or_else(|e| panic!("idem_lookup({scope:?}, {key:?}): {e}"))
    .iter()
    .map(|r| {
        let response: Option<String> = r.get(2);
        (
            r.get(0),
            r.get(1),
            response.map(|t| serde_json::from_str(&t).unwrap()),
        )
    })
    .collect()
}

/// Claims, completes, looks up and replays (scope, key) with payloads built from `s`;
/// every step must give back exactly the bytes that went in.
fn round_trip(c: &mut Client, scope: &str, key: &str, s: &str) {
    let request = request_of(s);
    let response = response_of(s);
    let claim = try_begin(c, scope, key, Some(&request), None, None)
        .unwrap_or_else(|e| panic!("begin {scope:?}/{key:?}: {e}"));
    assert_eq!(claim.outcome, "claimed", "{scope:?}/{key:?}");
    complete(c, scope, key, claim.fence.unwrap(), &response)
        .unwrap_or_else(|e| panic!("complete {scope:?}/{key:?}: {e}"));
    let expected: Value = serde_json::from_str(&response).unwrap();
    let found = lookup(c, scope, key);
    assert_eq!(found.len(), 1, "{scope:?}/{key:?}: {found:?}");
    assert_eq!(found[0].0.as_bytes(), scope.as_bytes(), "scope changed");
    assert_eq!(found[0].1.as_bytes(), key.as_bytes(), "key changed");
    assert_eq!(found[0].2.as_ref(), Some(&expected), "stored response");
    let replay = try_begin(c, scope, key, Some(&request), None, None).unwrap();
    assert_eq!(replay.outcome, "replay", "{scope:?}/{key:?}");
    let replayed: Value = serde_json::from_str(replay.response.as_deref().unwrap()).unwrap();
    assert_eq!(replayed, expected, "replayed response");
}

#[test]
fn hostile_keys_round_trip_exactly_and_run_nothing() {
    let db = Db::fresh("inputs_keys");
    let mut c = db.connect();
    let canary = Canary::create(&mut c, "inputs");
    c.batch_execute("CREATE TABLE public.victim (x int)")
        .unwrap();
    let scope = scope("inputs");
    for s in hostile(&canary.hit("key")) {
        round_trip(&mut c, &scope, &s, &s);
    }
    canary.assert_empty(&mut c);
    let victim: bool = c
        .query_one("SELECT to_regclass('public.victim') IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert!(victim, "the victim table is gone");
    drop(c);
}

#[test]
fn hostile_scopes_round_trip_exactly_and_run_nothing() {
    let db = Db::fresh("inputs_scopes");
    let mut c = db.connect();
    let canary = Canary::create(&mut c, "inputs");
    for s in hostile(&canary.hit("scope")) {
        round_trip(&mut c, &s, "k", &s);
    }
    canary.assert_empty(&mut c);
    drop(c);
}

/// Every hostile string is its own call: claiming them one after another in one scope
/// (and as scopes with one key) never meets an earlier record, so nothing was matched as a
/// pattern, folded by case or normalisation, or trimmed.
#[test]
fn lookalike_keys_and_scopes_are_distinct_calls() {
    let db = Db::fresh("inputs_distinct");
    let mut c = db.connect();
    let strings = hostile("SELECT 1");
    let mut seen = std::collections::HashSet::new();
    for s in &strings {
        assert!(seen.insert(s.clone()), "the list repeats {s:?}");
    }
    let as_keys = scope("distinct");
    let mut fences = Vec::new();
    for s in &strings {
        let b = begin(&mut c, &as_keys, s);
        assert_eq!(b.outcome, "claimed", "key {s:?} met an earlier record");
        fences.push(b.fence.unwrap());
    }
    for s in &strings {
        let b = begin(&mut c, s, "k");
        assert_eq!(b.outcome, "claimed", "scope {s:?} met an earlier record");
    }
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), strings.len(), "two keys shared a fence");
    // One record per key, each found by its own key only.
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM idempotency.records WHERE scope = $1",
            &[&as_keys],
        )
        .unwrap()
        .get(0);
    assert_eq!(n as usize, strings.len());
    for s in &strings {
        let found = lookup(&mut c, &as_keys, s);
        assert_eq!(found.len(), 1, "lookup of {s:?}: {found:?}");
        assert_eq!(found[0].1, *s);
    }
    drop(c);
}

/// Patterns look up nothing when only what they would match exists.
#[test]
fn pattern_keys_never_match_other_keys() {
    let db = Db::fresh("inputs_patterns");
    let mut c = db.connect();
    let sc = scope("patterns");
    for key in ["a", "ab", "abc", "A", "x"] {
        begin(&mut c, &sc, key);
    }
    for pattern in [
        "%", "_", "a%", "a_", "_b", ".*", "a.*", "[a-z]", "*", "A%", "a|x",
    ] {
        assert!(
            lookup(&mut c, &sc, pattern).is_empty(),
            "lookup of {pattern:?} found a record"
        );
        let forgot: bool = c
            .query_one("SELECT idem_forget($1, $2)", &[&sc, &pattern])
            .unwrap()
            .get(0);
        assert!(!forgot, "forget of {pattern:?} removed something");
        let e = c
            .query_one(
                "SELECT * FROM idem_complete($1, $2, 1, '{}')",
                &[&sc, &pattern],
            )
            .unwrap_err();
        assert_eq!(sqlstate(&e), "IK003", "complete of {pattern:?}");
    }
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM idempotency.records WHERE scope = $1",
            &[&sc],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
    drop(c);
}

/// Requests that differ only by normalisation, case or a trailing space are different
/// requests: different fingerprints (so different HASH_INPUT keys), and a mismatch under
/// one explicit key.
#[test]
fn lookalike_requests_are_different_requests() {
    let db = Db::fresh("inputs_requests");
    let mut c = db.connect();
    let sc = scope("requests");
    let pairs = [
        ("\u{e9}", "e\u{301}"),
        ("Key", "key"),
        ("k", "k "),
        ("a\u{200d}b", "ab"),
        ("a\u{a0}b", "a b"),
        ("%", "_"),
    ];
    for (a, b) in pairs {
        let (ra, rb) = (json!({ "v": a }).to_string(), json!({ "v": b }).to_string());
        let key_a: String = c
            .query_one("SELECT encode(idem_hash($1::text::jsonb), 'hex')", &[&ra])
            .unwrap()
            .get(0);
        let key_b: String = c
            .query_one("SELECT encode(idem_hash($1::text::jsonb), 'hex')", &[&rb])
            .unwrap()
            .get(0);
        assert_ne!(key_a, key_b, "{a:?} and {b:?} hash alike");
        let first = try_begin(&mut c, &sc, &key_a, Some(&ra), None, None).unwrap();
        assert_eq!(first.outcome, "claimed");
        let other = try_begin(&mut c, &sc, &key_b, Some(&rb), None, None).unwrap();
        assert_eq!(other.outcome, "claimed", "{b:?} met {a:?}'s record");
        let explicit = format!("explicit-{key_a}");
        try_begin(&mut c, &sc, &explicit, Some(&ra), None, None).unwrap();
        let e = try_begin(&mut c, &sc, &explicit, Some(&rb), None, None).unwrap_err();
        assert_eq!(sqlstate(&e), "IK001", "{b:?} under {a:?}'s key");
    }
    drop(c);
}

/// A NUL cannot reach the server as text, and a U+0000 cannot be in a jsonb: PostgreSQL
/// refuses both at input, before any of our code runs, and nothing is written.
#[test]
fn nul_in_text_and_json_is_refused_before_anything_is_written() {
    let db = Db::fresh("inputs_nul");
    let mut c = db.connect();
    let sc = scope("nul");
    let held = begin(&mut c, &sc, "held");
    let before = storage_picture(&mut c);
    let e = try_begin(&mut c, &sc, "a\0b", None, None, None).unwrap_err();
    assert_eq!(sqlstate(&e), "22021", "NUL in a key: {e}");
    let e = try_begin(&mut c, "s\0", "k", None, None, None).unwrap_err();
    assert_eq!(sqlstate(&e), "22021", "NUL in a scope: {e}");
    let e = try_begin(&mut c, &sc, "k", Some(r#"{"v": "a\u0000b"}"#), None, None).unwrap_err();
    assert_eq!(sqlstate(&e), "22P05", "U+0000 in a request: {e}");
    let e = complete(
        &mut c,
        &sc,
        "held",
        held.fence.unwrap(),
        r#"{"v": "\u0000"}"#,
    )
    .unwrap_err();
    assert_eq!(sqlstate(&e), "22P05", "U+0000 in a response: {e}");
    assert_eq!(storage_picture(&mut c), before);
    drop(c);
}
