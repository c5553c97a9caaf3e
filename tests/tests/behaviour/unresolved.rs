//! Unresolved calls (0.8.0): a record whose outcome is unknown (a claim whose lease lapsed,
//! a record holding one of the client's marks) is not reusable when its ttl ends. A later
//! idem_begin takes a lapsed claim over (recovered, attempt + 1, the same upstream key) or
//! replays the mark, until an operator resolves it (idem_unresolved, idem_resolve, audited
//! in idem_resolutions) or its unresolved bound passes. And when a key becomes reusable
//! (docs/client.md, "When a key can be used again"): the ttl counts from the claim for a
//! call in progress, from the completion for a result, and replays do not extend it.
//!
//! Every wait is for observable state: the server's clock passing a time the record
//! showed (expires_at, lease_until), never a sleep.

use std::time::Duration;

use pg_idempotency_tests::*;

/// Long enough for a ttl of a few seconds to run out on a loaded machine.
const BOUND: Duration = Duration::from_secs(30);

const REFUSE_MARK: &str = r#"{"pg_idempotency": {"outcome_unknown": "taken over: refused"}}"#;
const UNRECORDED_MARK: &str = r#"{"pg_idempotency": {"unrecorded": "too large"}}"#;

/// What idem_begin answered, with its times as text (the server's).
#[derive(Debug, Clone)]
struct Answer {
    outcome: String,
    fence: Option<i64>,
    attempt: i32,
    recovered: bool,
    upstream_key: String,
    response: Option<String>,
    expires_at: String,
    lease_until: Option<String>,
}

fn try_claim(
    c: &mut Client,
    scope: &str,
    key: &str,
    ttl: &str,
    lease: &str,
    unresolved_ttl: Option<&str>,
) -> Result<Answer, postgres::Error> {
    // The argument only when given, so that what does not need it runs on a release
    // before it too (and shows what that release did).
    let select = "SELECT outcome, fence, attempt, recovered, upstream_key::text, response::text, \
                  expires_at::text, lease_until::text FROM idem_begin(scope => $1, key => $2, \
                  ttl => $3::text::interval, lease => $4::text::interval";
    let row = match unresolved_ttl {
        Some(u) => c.query_one(
            &format!("{select}, unresolved_ttl => $5::text::interval)"),
            &[&scope, &key, &ttl, &lease, &u],
        )?,
        None => c.query_one(&format!("{select})"), &[&scope, &key, &ttl, &lease])?,
    };
    Ok(Answer {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        recovered: row.get(3),
        upstream_key: row.get(4),
        response: row.get(5),
        expires_at: row.get(6),
        lease_until: row.get(7),
    })
}

fn claim(c: &mut Client, scope: &str, key: &str, ttl: &str, lease: &str) -> Answer {
    try_claim(c, scope, key, ttl, lease, None).unwrap_or_else(|e| panic!("idem_begin: {e}"))
}

/// Completes `fence` with `response`; answers the record's expiry.
fn complete_with(
    c: &mut Client,
    scope: &str,
    key: &str,
    fence: i64,
    response: &str,
    succeeded: bool,
) -> String {
    c.query_one(
        "SELECT expires_at::text FROM idem_complete($1, $2, $3, $4::text::jsonb, $5, true)",
        &[&scope, &key, &fence, &response, &succeeded],
    )
    .unwrap_or_else(|e| panic!("idem_complete: {e}"))
    .get(0)
}

/// Waits until the server's clock has passed `at` (a time a record showed).
fn wait_past(c: &mut Client, what: &str, at: &str) {
    wait_until(what, BOUND, || {
        c.query_one("SELECT clock_timestamp() > $1::text::timestamptz", &[&at])
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or_else(|e| panic!("the clock: {e}"))
    });
}

/// Whether idem_lookup shows the record.
fn looked_up(c: &mut Client, scope: &str, key: &str) -> bool {
    c.query_one("SELECT count(*) FROM idem_lookup($1, $2)", &[&scope, &key])
        .map(|r| r.get::<_, i64>(0) == 1)
        .unwrap_or_else(|e| panic!("idem_lookup: {e}"))
}

/// The caller's rows of idem_unresolved for `scope`: (key, state, why, fence, attempt,
/// upstream_key).
fn unresolved(c: &mut Client, scope: &str) -> Vec<(String, String, String, i64, i32, String)> {
    c.query(
        "SELECT key, state, why, fence, attempt, upstream_key::text FROM idem_unresolved() \
         WHERE scope = $1 ORDER BY key",
        &[&scope],
    )
    .unwrap_or_else(|e| panic!("idem_unresolved: {e}"))
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
    .collect()
}

fn resolve(
    c: &mut Client,
    scope: &str,
    key: &str,
    fence: i64,
    state: &str,
    action: &str,
    response: Option<&str>,
) -> Result<String, postgres::Error> {
    c.query_one(
        "SELECT idem_resolve($1, $2, $3, $4, $5, $6::text::jsonb)",
        &[&scope, &key, &fence, &state, &action, &response],
    )
    .map(|r| r.get(0))
}

/// A claim with a short ttl and lease left running by a holder that died, past its ttl.
fn crashed_past_ttl(c: &mut Client, scope: &str, key: &str) -> Answer {
    let first = claim(c, scope, key, "2 seconds", "1 second");
    assert_eq!((first.outcome.as_str(), first.attempt), ("claimed", 1));
    wait_past(c, "the crashed claim's ttl to end", &first.expires_at);
    first
}

#[test]
fn a_crashed_claim_past_its_ttl_is_taken_over_with_its_upstream_key() {
    let mut c = connect();
    let s = scope("unresolved-crash");
    let first = crashed_past_ttl(&mut c, &s, "k");
    // Still there for an operator to see, past its ttl.
    let kept = looked_up(&mut c, &s, "k");
    let again = claim(&mut c, &s, "k", "2 seconds", "1 second");
    assert_eq!(again.outcome, "claimed");
    assert!(
        again.recovered,
        "a lapsed claim past its ttl was claimed afresh: {again:?}"
    );
    assert!(kept, "idem_lookup lost a lapsed claim at its ttl");
    assert_eq!(again.attempt, 2, "{again:?}");
    assert_eq!(
        again.upstream_key, first.upstream_key,
        "a takeover must keep the upstream key a provider deduplicates on"
    );
    assert!(again.fence > first.fence);
}

#[test]
fn marks_outlive_the_ttl_and_are_replayed() {
    let mut c = connect();
    let s = scope("unresolved-marks");
    for (key, mark, succeeded) in [
        ("refused", REFUSE_MARK, false),
        ("unrecorded", UNRECORDED_MARK, true),
    ] {
        let held = claim(&mut c, &s, key, "2 seconds", "1 second");
        let fence = held.fence.expect("a claim has a fence");
        let expires = complete_with(&mut c, &s, key, fence, mark, succeeded);
        wait_past(&mut c, "the mark's ttl to end", &expires);
        let kept = looked_up(&mut c, &s, key);
        let later = claim(&mut c, &s, key, "2 seconds", "1 second");
        assert_eq!(
            (later.outcome.as_str(), later.attempt),
            ("replay", 1),
            "the {key} mark ended with the ttl: {later:?}"
        );
        assert!(kept, "idem_lookup lost the {key} mark at its ttl");
        let stored: serde_json::Value =
            serde_json::from_str(later.response.as_deref().unwrap_or("null")).unwrap_or_default();
        let given: serde_json::Value = serde_json::from_str(mark).unwrap_or_default();
        assert_eq!(stored, given);
    }
    let listed = unresolved(&mut c, &s);
    let whys: Vec<&str> = listed.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(whys, ["outcome_unknown", "unrecorded"], "{listed:?}");
}

#[test]
fn purge_keeps_unresolved_records_until_their_bound() {
    let mut c = connect();
    let s = scope("unresolved-purge");
    crashed_past_ttl(&mut c, &s, "crashed");
    let held = claim(&mut c, &s, "marked", "2 seconds", "1 second");
    let expires = complete_with(
        &mut c,
        &s,
        "marked",
        held.fence.unwrap_or_default(),
        REFUSE_MARK,
        false,
    );
    let done = claim(&mut c, &s, "done", "2 seconds", "1 second");
    let done_expires = complete_with(
        &mut c,
        &s,
        "done",
        done.fence.unwrap_or_default(),
        r#"{"ok": 1}"#,
        true,
    );
    // A bound of one second: past it, the crashed claim is an ordinary expired row.
    let short = try_claim(
        &mut c,
        &s,
        "bounded",
        "2 seconds",
        "1 second",
        Some("1 second"),
    )
    .unwrap_or_else(|e| panic!("idem_begin: {e}"));
    wait_past(&mut c, "the mark's ttl to end", &expires);
    wait_past(&mut c, "the result's ttl to end", &done_expires);
    let bound: String = c
        .query_one(
            "SELECT ($1::text::timestamptz + interval '1 second')::text",
            &[&short.lease_until],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    wait_past(&mut c, "the bounded claim's unresolved bound", &bound);
    wait_past(&mut c, "the bounded claim's ttl", &short.expires_at);
    c.query_one("SELECT idem_purge_expired()", &[])
        .unwrap_or_else(|e| panic!("idem_purge_expired: {e}"));
    let rows: Vec<String> = c
        .query(
            "SELECT key FROM idempotency.records WHERE scope = $1 ORDER BY key",
            &[&s],
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        rows,
        ["crashed", "marked"],
        "purge must keep only the unresolved records"
    );
    assert!(looked_up(&mut c, &s, "crashed") && looked_up(&mut c, &s, "marked"));
    // Past its own bound, a crashed claim is a fresh call.
    let fresh = claim(&mut c, &s, "bounded", "2 seconds", "1 second");
    assert_eq!((fresh.attempt, fresh.recovered), (1, false), "{fresh:?}");
    assert_ne!(fresh.upstream_key, short.upstream_key);
}

#[test]
fn the_unresolved_bound_is_the_call_s_else_the_policy_s_else_the_setting_else_seven_days() {
    let mut c = connect();
    let s = scope("unresolved-bound");
    let span = |c: &mut Client, key: &str| -> String {
        c.query_one(
            "SELECT (until - since)::text FROM idem_unresolved() WHERE scope = $1 AND key = $2",
            &[&s, &key],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("idem_unresolved: {e}"))
    };
    let a = claim(&mut c, &s, "default", "2 seconds", "1 second");
    try_claim(&mut c, &s, "given", "2 seconds", "1 second", Some("3 days"))
        .unwrap_or_else(|e| panic!("{e}"));
    // A scope's policy; the call's own value still wins.
    let p = scope("unresolved-policy");
    c.execute(
        "SELECT idem_set_policy($1, unresolved_ttl => '4 days')",
        &[&p],
    )
    .unwrap_or_else(|e| panic!("idem_set_policy: {e}"));
    let shown: String = c
        .query_one(
            "SELECT (unresolved_ttl = interval '4 days')::text FROM idem_policies() WHERE scope = $1",
            &[&p],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("idem_policies: {e}"));
    assert_eq!(shown, "true", "the policy keeps its unresolved_ttl");
    let pa = claim(&mut c, &p, "policy", "2 seconds", "1 second");
    try_claim(&mut c, &p, "call", "2 seconds", "1 second", Some("5 days"))
        .unwrap_or_else(|e| panic!("{e}"));
    c.batch_execute("SET pg_idempotency.unresolved_ttl = '2d'")
        .unwrap_or_else(|e| panic!("{e}"));
    let b = claim(&mut c, &s, "setting", "2 seconds", "1 second");
    c.batch_execute("RESET pg_idempotency.unresolved_ttl")
        .unwrap_or_else(|e| panic!("{e}"));
    wait_past(
        &mut c,
        "the leases to lapse",
        a.lease_until.as_deref().unwrap_or_default(),
    );
    wait_past(
        &mut c,
        "the leases to lapse",
        b.lease_until.as_deref().unwrap_or_default(),
    );
    assert_eq!(span(&mut c, "default"), "7 days");
    assert_eq!(span(&mut c, "given"), "3 days");
    assert_eq!(span(&mut c, "setting"), "2 days");
    wait_past(
        &mut c,
        "the leases to lapse",
        pa.lease_until.as_deref().unwrap_or_default(),
    );
    let spans: Vec<(String, String)> = c
        .query(
            "SELECT key, (until - since)::text FROM idem_unresolved() WHERE scope = $1 ORDER BY key",
            &[&p],
        )
        .unwrap_or_else(|e| panic!("idem_unresolved: {e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        spans,
        [
            ("call".to_string(), "5 days".to_string()),
            ("policy".to_string(), "4 days".to_string())
        ]
    );
    c.execute("SELECT idem_drop_policy($1)", &[&p])
        .unwrap_or_else(|e| panic!("idem_drop_policy: {e}"));
    // Hostile values are refused like a ttl's, and change nothing. (Infinite intervals exist
    // from PostgreSQL 17 on; an older server cannot express one.)
    let infinite: &[&str] = if server_major(&mut c) >= 17 {
        &["infinity"]
    } else {
        &[]
    };
    for bad in ["0", "-1 second", "100 years"].iter().chain(infinite) {
        let e = try_claim(&mut c, &s, "bad", "2 seconds", "1 second", Some(bad))
            .expect_err("a bad unresolved_ttl was taken");
        assert_eq!(sqlstate(&e), "22023", "{bad}: {e}");
    }
    assert!(!looked_up(&mut c, &s, "bad"));
}

/// One row of idem_resolutions as the test reads it: key, action, resolved_by, fence, state,
/// why, attempt, response.
type AuditRow = (
    String,
    String,
    String,
    i64,
    String,
    String,
    i32,
    Option<String>,
);

#[test]
fn resolve_records_releases_or_forgets_with_an_audit_row_each() {
    let mut c = connect();
    let s = scope("unresolved-resolve");
    let mut firsts = Vec::new();
    for key in ["a-found", "b-release", "c-forget"] {
        let first = claim(&mut c, &s, key, "1 hour", "1 second");
        firsts.push(first);
    }
    for f in &firsts {
        wait_past(
            &mut c,
            "the leases to lapse",
            f.lease_until.as_deref().unwrap_or_default(),
        );
    }
    let listed = unresolved(&mut c, &s);
    assert_eq!(listed.len(), 3, "{listed:?}");
    for (row, first) in listed.iter().zip(&firsts) {
        assert_eq!(
            (row.1.as_str(), row.2.as_str()),
            ("in_progress", "lease_lapsed")
        );
        assert_eq!(
            (Some(row.3), row.5.as_str()),
            (first.fence, first.upstream_key.as_str())
        );
    }
    let found = resolve(
        &mut c,
        &s,
        "a-found",
        listed[0].3,
        "in_progress",
        "succeeded",
        Some(r#"{"order": 42}"#),
    )
    .unwrap_or_else(|e| panic!("idem_resolve succeeded: {e}"));
    assert_eq!(found, "succeeded");
    let released = resolve(
        &mut c,
        &s,
        "b-release",
        listed[1].3,
        "in_progress",
        "release",
        None,
    )
    .unwrap_or_else(|e| panic!("idem_resolve release: {e}"));
    assert_eq!(released, "absent");
    let forgotten = resolve(
        &mut c,
        &s,
        "c-forget",
        listed[2].3,
        "in_progress",
        "forget",
        None,
    )
    .unwrap_or_else(|e| panic!("idem_resolve forget: {e}"));
    assert_eq!(forgotten, "absent");

    // The result found is replayed; a released call runs again, afresh; a forgotten one
    // is gone.
    let replay = claim(&mut c, &s, "a-found", "1 hour", "1 second");
    assert_eq!(replay.outcome, "replay");
    assert_eq!(replay.response.as_deref(), Some(r#"{"order": 42}"#));
    let rerun = claim(&mut c, &s, "b-release", "1 hour", "1 second");
    assert_eq!(
        (rerun.outcome.as_str(), rerun.attempt, rerun.recovered),
        ("claimed", 1, false)
    );
    assert!(!looked_up(&mut c, &s, "c-forget"));
    assert!(unresolved(&mut c, &s)
        .iter()
        .all(|r| r.0 == "b-release" && r.3 != listed[1].3));

    let me: String = c
        .query_one("SELECT current_user::text", &[])
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    let audit: Vec<AuditRow> = c
        .query(
            "SELECT key, action, resolved_by::text, fence, state, why, attempt, response::text \
             FROM idem_resolutions() WHERE scope = $1 ORDER BY key",
            &[&s],
        )
        .unwrap_or_else(|e| panic!("idem_resolutions: {e}"))
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get(5),
                r.get(6),
                r.get(7),
            )
        })
        .collect();
    let want: Vec<_> = [
        ("a-found", "succeeded", Some(r#"{"order": 42}"#)),
        ("b-release", "release", None),
        ("c-forget", "forget", None),
    ]
    .iter()
    .zip(&listed)
    .map(|((k, a, resp), row)| {
        (
            k.to_string(),
            a.to_string(),
            me.clone(),
            row.3,
            "in_progress".to_string(),
            "lease_lapsed".to_string(),
            1,
            resp.map(str::to_string),
        )
    })
    .collect();
    assert_eq!(audit, want);
}

#[test]
fn a_resolve_of_a_record_that_changed_is_refused_and_changes_nothing() {
    let mut c = connect();
    let s = scope("unresolved-changed");
    // Taken over after it was listed: the listed fence no longer holds it.
    let first = claim(&mut c, &s, "taken", "1 hour", "1 second");
    wait_past(
        &mut c,
        "the lease to lapse",
        first.lease_until.as_deref().unwrap_or_default(),
    );
    let listed = unresolved(&mut c, &s);
    assert_eq!(listed.len(), 1);
    let again = claim(&mut c, &s, "taken", "1 hour", "1 minute");
    assert!(again.recovered);
    let e = resolve(
        &mut c,
        &s,
        "taken",
        listed[0].3,
        "in_progress",
        "succeeded",
        Some("{}"),
    )
    .expect_err("a resolve with a stale fence was taken");
    assert_eq!(sqlstate(&e), "IK003", "{e}");

    // Completed by its holder after it was listed: no longer awaiting a decision.
    let held = claim(&mut c, &s, "completed", "1 hour", "1 second");
    wait_past(
        &mut c,
        "the lease to lapse",
        held.lease_until.as_deref().unwrap_or_default(),
    );
    let fence = held.fence.unwrap_or_default();
    assert!(unresolved(&mut c, &s)
        .iter()
        .any(|r| r.0 == "completed" && r.3 == fence));
    complete_with(&mut c, &s, "completed", fence, r#"{"sent": true}"#, true);
    let e = resolve(
        &mut c,
        &s,
        "completed",
        fence,
        "in_progress",
        "release",
        None,
    )
    .expect_err("a resolve of a completed record was taken");
    assert_eq!(sqlstate(&e), "IK003", "{e}");
    let e = resolve(&mut c, &s, "completed", fence, "succeeded", "release", None)
        .expect_err("a resolve of a known result was taken");
    assert_eq!(sqlstate(&e), "IK003", "{e}");

    // Bad words are refused before anything is read.
    let e = resolve(
        &mut c,
        &s,
        "taken",
        again.fence.unwrap_or_default(),
        "in_progress",
        "retry",
        None,
    )
    .expect_err("an unknown action was taken");
    assert_eq!(sqlstate(&e), "22023", "{e}");
    let e = resolve(
        &mut c,
        &s,
        "taken",
        again.fence.unwrap_or_default(),
        "in_progress",
        "release",
        Some("{}"),
    )
    .expect_err("a release with a response was taken");
    assert_eq!(sqlstate(&e), "22023", "{e}");

    // Nothing changed: the takeover still holds its call, the result stays, no audit row.
    let live = claim(&mut c, &s, "taken", "1 hour", "1 minute");
    assert_eq!(live.outcome, "in_progress");
    assert_eq!(
        claim(&mut c, &s, "completed", "1 hour", "1 second").outcome,
        "replay"
    );
    let audited: i64 = c
        .query_one(
            "SELECT count(*) FROM idem_resolutions() WHERE scope = $1",
            &[&s],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(audited, 0);
}

#[test]
fn a_result_expires_its_ttl_after_its_completion_and_replays_do_not_extend_it() {
    let mut c = connect();
    let s = scope("unresolved-expiry");
    // The ttl of a call in progress counts from its claim.
    let held = claim(&mut c, &s, "k", "3 seconds", "1 second");
    let from_claim: bool = c
        .query_one(
            "SELECT r.expires_at = r.created_at + interval '3 seconds' FROM idem_lookup($1, 'k') r",
            &[&s],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        from_claim,
        "a claim's expiry is its claim time plus its ttl"
    );
    // A result's counts from its completion.
    let expires = complete_with(
        &mut c,
        &s,
        "k",
        held.fence.unwrap_or_default(),
        r#"{"v": 1}"#,
        true,
    );
    let from_completion: bool = c
        .query_one(
            "SELECT r.expires_at = r.completed_at + interval '3 seconds' FROM idem_lookup($1, 'k') r",
            &[&s],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        from_completion,
        "a result's expiry is its completion plus its ttl"
    );
    // Replays answer the same expiry, and do not move it.
    for _ in 0..3 {
        let replay = claim(&mut c, &s, "k", "1 hour", "1 second");
        assert_eq!(
            (replay.outcome.as_str(), replay.expires_at.as_str()),
            ("replay", expires.as_str())
        );
    }
    wait_past(&mut c, "the result's ttl to end", &expires);
    assert!(!looked_up(&mut c, &s, "k"), "a result outlived its ttl");
    let fresh = claim(&mut c, &s, "k", "3 seconds", "1 second");
    assert_eq!(
        (fresh.outcome.as_str(), fresh.attempt, fresh.recovered),
        ("claimed", 1, false)
    );
    assert_ne!(fresh.upstream_key, held.upstream_key);
}

#[test]
fn a_role_lists_and_resolves_its_own_records_an_admin_any() {
    use pg_idempotency_tests::attack::TestRole;
    let dsn = dsn();
    let a = TestRole::create(&dsn, "unres_a", "IN ROLE idempotency_user");
    let b = TestRole::create(&dsn, "unres_b", "IN ROLE idempotency_user");
    let admin = TestRole::create(&dsn, "unres_admin", "IN ROLE idempotency_admin");
    let s = scope("unresolved-roles");
    let mut ca = a.login();
    let held = claim(&mut ca, &s, "k", "1 hour", "1 second");
    let fence = held.fence.unwrap_or_default();
    wait_past(
        &mut ca,
        "the lease to lapse",
        held.lease_until.as_deref().unwrap_or_default(),
    );
    assert_eq!(unresolved(&mut ca, &s).len(), 1, "its owner lists it");

    // Another role sees nothing of it, and may not name its owner.
    let mut cb = b.login();
    assert!(unresolved(&mut cb, &s).is_empty(), "another role listed it");
    let e = resolve(&mut cb, &s, "k", fence, "in_progress", "forget", None)
        .expect_err("another role resolved it");
    assert_eq!(
        sqlstate(&e),
        "IK003",
        "its own key space has no such record: {e}"
    );
    let e = cb
        .query_one(
            "SELECT idem_resolve($1, 'k', $2, 'in_progress', 'forget', owner => $3::text::regrole)",
            &[&s, &fence, &a.name],
        )
        .expect_err("another role named the owner");
    assert_eq!(sqlstate(&e), "42501", "{e}");
    let e = cb
        .query(
            "SELECT * FROM idem_unresolved($1::text::regrole)",
            &[&a.name],
        )
        .expect_err("another role listed the owner's records");
    assert_eq!(sqlstate(&e), "42501", "{e}");

    // An admin lists every owner's, and resolves the record of the owner it names.
    let mut cadmin = admin.login();
    let owners: Vec<String> = cadmin
        .query(
            "SELECT owner::text FROM idem_unresolved() WHERE scope = $1",
            &[&s],
        )
        .unwrap_or_else(|e| panic!("idem_unresolved: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, std::slice::from_ref(&a.name));
    let left: String = cadmin
        .query_one(
            "SELECT idem_resolve($1, 'k', $2, 'in_progress', 'release', owner => $3::text::regrole)",
            &[&s, &fence, &a.name],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("the admin's idem_resolve: {e}"));
    assert_eq!(left, "absent");
    // The audit names who resolved, and the owner sees its record's resolution.
    let seen: Vec<(String, String)> = ca
        .query(
            "SELECT resolved_by::text, owner::text FROM idem_resolutions() WHERE scope = $1",
            &[&s],
        )
        .unwrap_or_else(|e| panic!("idem_resolutions: {e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(seen, [(admin.name.clone(), a.name.clone())]);
    let none: i64 = cb
        .query_one(
            "SELECT count(*) FROM idem_resolutions() WHERE scope = $1",
            &[&s],
        )
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(none, 0, "another role saw the owner's resolutions");
}
