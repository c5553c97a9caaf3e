//! Isolation between roles (DESIGN 7, 0.2.0): each role has its own key space. Role A's
//! record is absent for role B: B claims the same (scope, key) as its own call, and whatever
//! B does with A's key (look it up, complete, extend or release it with A's valid fence,
//! forget it, wait on it) is answered as for a key nobody used and leaves A's record as it
//! was. Each step is followed by a look at A's stored record.

use pg_idempotency_tests::attack::TestRole;
use pg_idempotency_tests::*;

/// Role A, role B (both in idempotency_user) and an idempotency_admin, with their sessions.
struct Pair {
    a: TestRole,
    b: TestRole,
    admin: TestRole,
}

impl Pair {
    fn new() -> Pair {
        let dsn = dsn();
        Pair {
            a: TestRole::create(&dsn, "iso_a", "IN ROLE idempotency_user"),
            b: TestRole::create(&dsn, "iso_b", "IN ROLE idempotency_user"),
            admin: TestRole::create(&dsn, "iso_admin", "IN ROLE idempotency_admin"),
        }
    }
}

/// A's stored record(s) of `scope`, every column, read from storage as the superuser, and
/// A's own idem_lookup of (scope, key).
fn a_picture(
    a: &mut Client,
    role: &TestRole,
    scope: &str,
    key: &str,
) -> (Vec<String>, Vec<String>) {
    let stored = connect()
        .query(
            "SELECT (r.*)::text FROM idempotency.records r \
             WHERE r.scope = $1 AND r.owner::oid = (SELECT oid FROM pg_roles WHERE rolname = $2) \
             ORDER BY r.key",
            &[&scope, &role.name],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let seen = a
        .query(
            "SELECT (l.*)::text FROM idem_lookup($1, $2) l",
            &[&scope, &key],
        )
        .unwrap_or_else(|e| panic!("A's idem_lookup: {}", error_text(&e)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    (stored, seen)
}

/// SQLSTATE, message, detail and hint of a failed statement.
fn error_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{}: {} / detail: {} / hint: {}",
            db.code().code(),
            db.message(),
            db.detail().unwrap_or("-"),
            db.hint().unwrap_or("-")
        ),
        None => e.to_string(),
    }
}

/// The calls that act on a held claim, each given (scope, key, fence).
const HOLDER_CALLS: &[(&str, &str)] = &[
    (
        "idem_complete",
        "SELECT * FROM idem_complete($1, $2, $3, '{\"by\": \"b\"}'::jsonb)",
    ),
    ("idem_extend", "SELECT * FROM idem_extend($1, $2, $3)"),
    ("idem_release", "SELECT idem_release($1, $2, $3)"),
];

/// `idem_begin` as the tests call it here: outcome, fence, attempt, upstream key, response.
struct Began {
    outcome: String,
    fence: Option<i64>,
    attempt: i32,
    upstream_key: String,
    response: Option<String>,
}

fn begin_as(c: &mut Client, scope: &str, key: &str, wait: &str) -> Began {
    let row = c
        .query_one(
            "SELECT outcome, fence, attempt, upstream_key::text, response::text \
             FROM idem_begin($1, $2, wait => $3::text::interval)",
            &[&scope, &key, &wait],
        )
        .unwrap_or_else(|e| panic!("idem_begin: {}", error_text(&e)));
    Began {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        upstream_key: row.get(3),
        response: row.get(4),
    }
}

#[test]
fn another_role_cannot_touch_a_claim_and_claims_the_same_key_as_its_own_call() {
    let pair = Pair::new();
    let scope = scope("isolation");
    let mut a = pair.a.login();
    let mut b = pair.b.login();

    let a_claim = begin_as(&mut a, &scope, "k", "0");
    assert_eq!(a_claim.outcome, "claimed");
    let a_fence = a_claim.fence.unwrap();
    let held = a_picture(&mut a, &pair.a, &scope, "k");
    assert_eq!((held.0.len(), held.1.len()), (1, 1), "A holds one record");

    // B does not see it.
    let seen = b
        .query("SELECT * FROM idem_lookup($1, 'k')", &[&scope])
        .unwrap_or_else(|e| panic!("B's idem_lookup: {}", error_text(&e)));
    assert!(seen.is_empty(), "B sees A's record");
    assert_eq!(a_picture(&mut a, &pair.a, &scope, "k"), held);

    // A's valid fence in B's hands is a made-up fence on a key nobody used.
    for (name, sql) in HOLDER_CALLS {
        let stolen = b
            .query(*sql, &[&scope, &"k", &a_fence])
            .err()
            .unwrap_or_else(|| panic!("{name}: B acted on A's claim"));
        let made_up = b
            .query(*sql, &[&scope, &"never-used-k", &a_fence])
            .err()
            .unwrap_or_else(|| panic!("{name}: a made-up fence was accepted"));
        assert_eq!(
            sqlstate(&stolen),
            "IK003",
            "{name}: {}",
            error_text(&stolen)
        );
        assert_eq!(
            error_text(&stolen),
            error_text(&made_up).replace("never-used-k", "k"),
            "{name}: B learns that A's key exists"
        );
        assert_eq!(
            a_picture(&mut a, &pair.a, &scope, "k"),
            held,
            "after B's {name}"
        );
    }

    // B's forget is of B's own (absent) record.
    let forgot: bool = b
        .query_one("SELECT idem_forget($1, 'k')", &[&scope])
        .unwrap_or_else(|e| panic!("B's idem_forget: {}", error_text(&e)))
        .get(0);
    assert!(!forgot, "B forgot A's record");
    assert_eq!(
        a_picture(&mut a, &pair.a, &scope, "k"),
        held,
        "after B's idem_forget"
    );

    // The same (scope, key) is B's own call: its own fence, first attempt, own upstream key.
    let b_claim = begin_as(&mut b, &scope, "k", "0");
    assert_eq!(b_claim.outcome, "claimed", "B's call is independent of A's");
    assert_ne!(b_claim.fence, Some(a_fence));
    assert_eq!(b_claim.attempt, 1);
    assert_ne!(b_claim.upstream_key, a_claim.upstream_key);
    assert_eq!(
        a_picture(&mut a, &pair.a, &scope, "k"),
        held,
        "after B's claim"
    );

    // A completes and replays as if B were not there.
    let state = complete(&mut a, &scope, "k", a_fence, r#"{"by": "a"}"#)
        .unwrap_or_else(|e| panic!("A's idem_complete: {}", error_text(&e)));
    assert_eq!(state, "succeeded");
    let a_replay = begin_as(&mut a, &scope, "k", "0");
    assert_eq!(a_replay.outcome, "replay");
    assert_eq!(a_replay.response.as_deref(), Some(r#"{"by": "a"}"#));

    // B's call is still B's: running, then B's own result, never A's.
    let b_running = begin_as(&mut b, &scope, "k", "0");
    assert_eq!(b_running.outcome, "in_progress", "B is shown A's result");
    let state = complete(
        &mut b,
        &scope,
        "k",
        b_claim.fence.unwrap(),
        r#"{"by": "b"}"#,
    )
    .unwrap_or_else(|e| panic!("B's idem_complete: {}", error_text(&e)));
    assert_eq!(state, "succeeded");
    let b_replay = begin_as(&mut b, &scope, "k", "0");
    assert_eq!(b_replay.outcome, "replay");
    assert_eq!(b_replay.response.as_deref(), Some(r#"{"by": "b"}"#));
    let a_replay = begin_as(&mut a, &scope, "k", "0");
    assert_eq!(a_replay.response.as_deref(), Some(r#"{"by": "a"}"#));
}

#[test]
fn hash_input_derives_the_same_key_for_both_roles_into_separate_records() {
    let pair = Pair::new();
    let scope = scope("isolation-hash");
    let request = r#"{"to": "x@example.com", "amount": 10}"#;
    let mut su = connect();
    let derived: String = su
        .query_one(
            "SELECT encode(idem_hash($1::text::jsonb), 'hex')",
            &[&request],
        )
        .unwrap()
        .get(0);
    // (outcome, fence, the key the call used) of a HASH_INPUT call: NULL key, a request.
    let hashed = |c: &mut Client| -> (String, i64, String) {
        let row = c
            .query_one(
                "SELECT outcome, fence, key FROM idem_begin($1, NULL, $2::text::jsonb)",
                &[&scope, &request],
            )
            .unwrap_or_else(|e| panic!("idem_begin: {}", error_text(&e)));
        (row.get(0), row.get(1), row.get(2))
    };
    let a = hashed(&mut pair.a.login());
    let b = hashed(&mut pair.b.login());
    assert_eq!((a.0.as_str(), b.0.as_str()), ("claimed", "claimed"));
    assert_eq!(a.2, derived, "A's derived key");
    assert_eq!(b.2, derived, "B's derived key");
    assert_ne!(a.1, b.1);
    let owners: Vec<String> = su
        .query(
            "SELECT pg_get_userbyid(owner)::text FROM idempotency.records \
             WHERE scope = $1 AND key = $2 ORDER BY 1",
            &[&scope, &derived],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut expected = vec![pair.a.name.clone(), pair.b.name.clone()];
    expected.sort();
    assert_eq!(owners, expected, "one record per role");
}

/// (owner, scope) of the idem_metrics rows a session sees.
fn metrics_rows(c: &mut Client) -> Vec<(String, String)> {
    let columns = c
        .prepare("SELECT * FROM idem_metrics()")
        .unwrap_or_else(|e| panic!("idem_metrics: {}", error_text(&e)));
    assert_eq!(
        columns.columns()[0].name(),
        "owner",
        "owner is the first column"
    );
    // Not a folded row `(other scopes)`, which a session's metrics_scope_limit makes (none
    // here: each pair its own row).
    c.query(
        "SELECT pg_get_userbyid(owner)::text, scope FROM idem_metrics() \
         WHERE scope <> '(other scopes)'",
        &[],
    )
    .unwrap_or_else(|e| panic!("idem_metrics: {}", error_text(&e)))
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn metrics_show_a_role_its_own_rows_and_an_admin_every_owners() {
    let pair = Pair::new();
    let only_a = scope("isolation-metrics-a");
    let shared = scope("isolation-metrics-shared");
    let mut a = pair.a.login();
    let mut b = pair.b.login();
    begin_as(&mut a, &only_a, "k", "0");
    begin_as(&mut a, &shared, "k", "0");
    begin_as(&mut b, &shared, "k", "0");
    let (an, bn) = (pair.a.name.clone(), pair.b.name.clone());

    let bs = metrics_rows(&mut b);
    assert_eq!(
        bs,
        vec![(bn.clone(), shared.clone())],
        "B sees only its own row"
    );
    let as_ = metrics_rows(&mut a);
    let mut expected_a = vec![(an.clone(), only_a.clone()), (an.clone(), shared.clone())];
    expected_a.sort_by(|x, y| x.1.cmp(&y.1));
    let mut as_sorted = as_.clone();
    as_sorted.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(as_sorted, expected_a, "A sees only its own rows");

    let mut all: Vec<(String, String)> = metrics_rows(&mut pair.admin.login())
        .into_iter()
        .filter(|(_, s)| *s == only_a || *s == shared)
        .collect();
    all.sort();
    let mut expected = vec![
        (an.clone(), only_a.clone()),
        (an, shared.clone()),
        (bn, shared),
    ];
    expected.sort();
    assert_eq!(all, expected, "an admin sees every owner's rows");
}

#[test]
fn waiting_on_a_key_another_role_holds_claims_at_once() {
    let pair = Pair::new();
    let scope = scope("isolation-wait");
    let mut a = pair.a.login();
    let mut b = pair.b.login();
    assert_eq!(begin_as(&mut a, &scope, "k", "0").outcome, "claimed");
    let held = a_picture(&mut a, &pair.a, &scope, "k");

    let started = std::time::Instant::now();
    let b_claim = begin_as(&mut b, &scope, "k", "2 seconds");
    let took = started.elapsed();
    assert_eq!(b_claim.outcome, "claimed", "B waited on A's claim");
    assert!(
        took < std::time::Duration::from_millis(1500),
        "B's claim took {took:?}: it waited for A"
    );
    assert_eq!(a_picture(&mut a, &pair.a, &scope, "k"), held);
}
