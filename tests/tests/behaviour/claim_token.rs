//! `claim_token` (0.3.0): a repeat of the idem_begin that claimed, whose answer was lost, gets
//! the same claim back while its lease is live; every other case is as without a token.

use std::time::Duration;

use pg_idempotency_tests::*;

const TOKEN: &str = "6f1c2f0e-9a53-4c1e-8d0a-3b7e2f4d5a61";
const OTHER_TOKEN: &str = "0d4b8e7a-2c61-4f3e-9b15-7a8c6d5e4f32";

/// Every column of idem_begin's answer that a repeat must give again, as text.
#[derive(Debug, PartialEq)]
struct Answer {
    outcome: String,
    fence: Option<i64>,
    attempt: i32,
    recovered: bool,
    upstream_key: String,
    lease_until: Option<String>,
    expires_at: Option<String>,
}

fn begin_with(
    c: &mut Client,
    scope: &str,
    key: &str,
    token: Option<&str>,
    request: Option<&str>,
    lease: Option<&str>,
    wait: &str,
) -> Result<Answer, postgres::Error> {
    let row = c.query_one(
        "SELECT outcome, fence, attempt, recovered, upstream_key::text, lease_until::text, \
                expires_at::text \
         FROM idem_begin(scope => $1, key => $2, request => $3::text::jsonb, \
                         lease => $4::text::interval, wait => $5::text::interval, \
                         claim_token => $6::text::uuid)",
        &[&scope, &key, &request, &lease, &wait, &token],
    )?;
    Ok(Answer {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        recovered: row.get(3),
        upstream_key: row.get(4),
        lease_until: row.get(5),
        expires_at: row.get(6),
    })
}

fn begin_token(c: &mut Client, scope: &str, token: Option<&str>) -> Answer {
    begin_with(c, scope, "k", token, None, None, "0").unwrap()
}

/// The record's row version: a repeat that writes nothing leaves it where it was.
fn row_version(c: &mut Client, scope: &str) -> String {
    c.query_one(
        "SELECT ctid::text || '/' || xmin::text FROM idempotency.records WHERE scope = $1",
        &[&scope],
    )
    .unwrap()
    .get(0)
}

/// Waits, on the server's clock, until the claim's lease has lapsed.
fn until_lease_lapsed(c: &mut Client, scope: &str) {
    assert!(
        eventually(Duration::from_secs(10), || {
            c.query_one(
                "SELECT lease_until < clock_timestamp() FROM idem_lookup($1, 'k')",
                &[&scope],
            )
            .map(|r| r.get::<_, bool>(0))
            .unwrap_or(false)
        }),
        "the lease never lapsed"
    );
}

#[test]
fn a_repeat_with_the_claims_token_gets_the_same_claim_and_writes_nothing() {
    let scope = scope("token-repeat");
    let mut c = connect();
    let first = begin_token(&mut c, &scope, Some(TOKEN));
    assert_eq!(first.outcome, "claimed");
    let version = row_version(&mut c, &scope);
    let again = begin_token(&mut c, &scope, Some(TOKEN));
    assert_eq!(again, first);
    assert_eq!(row_version(&mut c, &scope), version, "the repeat wrote");
    // The claim given back is the claim: its fence completes the call.
    let state = complete(&mut c, &scope, "k", again.fence.unwrap(), r#"{"sent": 1}"#).unwrap();
    assert_eq!(state, "succeeded");
}

#[test]
fn another_token_or_none_finds_the_call_running() {
    let scope = scope("token-other");
    let mut c = connect();
    begin_token(&mut c, &scope, Some(TOKEN));
    assert_eq!(
        begin_token(&mut c, &scope, Some(OTHER_TOKEN)).outcome,
        "in_progress"
    );
    assert_eq!(begin_token(&mut c, &scope, None).outcome, "in_progress");
    // A claim made without a token is nobody's to repeat.
    let untokened = scope_untokened(&mut c);
    assert_eq!(
        begin_token(&mut c, &untokened, Some(TOKEN)).outcome,
        "in_progress"
    );
}

fn scope_untokened(c: &mut Client) -> String {
    let s = scope("token-none");
    assert_eq!(begin_token(c, &s, None).outcome, "claimed");
    s
}

#[test]
fn a_repeat_does_not_wait_for_its_own_claim() {
    let scope = scope("token-wait");
    let mut c = connect();
    let first = begin_token(&mut c, &scope, Some(TOKEN));
    // Without the rule this would wait the whole bound and answer in_progress.
    let again = begin_with(&mut c, &scope, "k", Some(TOKEN), None, None, "30 s").unwrap();
    assert_eq!(again, first);
}

#[test]
fn a_changed_request_under_the_same_token_is_still_a_mismatch() {
    let scope = scope("token-mismatch");
    let mut c = connect();
    begin_with(
        &mut c,
        &scope,
        "k",
        Some(TOKEN),
        Some(r#"{"to": "a"}"#),
        None,
        "0",
    )
    .unwrap();
    let err = begin_with(
        &mut c,
        &scope,
        "k",
        Some(TOKEN),
        Some(r#"{"to": "b"}"#),
        None,
        "0",
    )
    .expect_err("a different request got the claim");
    assert_eq!(sqlstate(&err), "IK001");
}

#[test]
fn after_the_lease_lapsed_the_same_token_takes_over_and_its_repeat_says_recovered() {
    let scope = scope("token-lapsed");
    let mut c = connect();
    let first = begin_with(&mut c, &scope, "k", Some(TOKEN), None, Some("100 ms"), "0").unwrap();
    until_lease_lapsed(&mut c, &scope);
    let taken = begin_with(&mut c, &scope, "k", Some(TOKEN), None, Some("60 s"), "0").unwrap();
    assert_eq!(taken.outcome, "claimed");
    assert!(taken.recovered);
    assert_eq!(taken.attempt, 2);
    assert!(taken.fence > first.fence);
    assert_eq!(taken.upstream_key, first.upstream_key);
    // The takeover's own repeat answers what the takeover answered: recovered included.
    let again = begin_token(&mut c, &scope, Some(TOKEN));
    assert_eq!(again, taken);
    // The first claim's fence is superseded.
    let err = complete(&mut c, &scope, "k", first.fence.unwrap(), "{}").unwrap_err();
    assert_eq!(sqlstate(&err), "IK003");
}

#[test]
fn a_completed_call_replays_to_its_token() {
    let scope = scope("token-done");
    let mut c = connect();
    let first = begin_token(&mut c, &scope, Some(TOKEN));
    complete(&mut c, &scope, "k", first.fence.unwrap(), r#"{"sent": 1}"#).unwrap();
    assert_eq!(begin_token(&mut c, &scope, Some(TOKEN)).outcome, "replay");
}

#[test]
fn a_released_claim_is_not_given_back() {
    let scope = scope("token-released");
    let mut c = connect();
    let first = begin_token(&mut c, &scope, Some(TOKEN));
    c.execute(
        "SELECT idem_release($1, 'k', $2)",
        &[&scope, &first.fence.unwrap()],
    )
    .unwrap();
    let again = begin_token(&mut c, &scope, Some(TOKEN));
    assert_eq!(again.outcome, "claimed");
    assert!(again.fence > first.fence, "a released fence came back");
}

#[test]
fn the_token_is_per_role() {
    use pg_idempotency_tests::attack::TestRole;
    let dsn = dsn();
    let other = TestRole::create(&dsn, "token_other", "IN ROLE idempotency_user");
    let scope = scope("token-role");
    let mut c = connect();
    let mine = begin_token(&mut c, &scope, Some(TOKEN));
    // Another role naming the same token on the same scope and key has a call of its own.
    let mut o = other.login();
    let theirs = begin_token(&mut o, &scope, Some(TOKEN));
    assert_eq!(theirs.outcome, "claimed");
    assert_ne!(theirs.fence, mine.fence);
    assert_eq!(begin_token(&mut c, &scope, Some(TOKEN)), mine);
}

#[test]
fn a_bad_token_is_refused_by_the_cast() {
    let scope = scope("token-bad");
    let mut c = connect();
    let err = c
        .query_one(
            "SELECT outcome FROM idem_begin($1, 'k', claim_token => 'not-a-uuid')",
            &[&scope],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22P02");
    let left: i64 = c
        .query_one(
            "SELECT count(*) FROM idempotency.records WHERE scope = $1",
            &[&scope],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

#[test]
fn a_repeat_counts_as_a_claim_in_the_metrics() {
    // Both backends count (0.8.0), in the suite's database however many scopes it holds;
    // every call writes its count (the extension otherwise keeps a duplicate's a while).
    let mut c = connect();
    c.batch_execute("SET pg_idempotency.count_flush_interval_ms = 0")
        .unwrap();
    let scope = scope("token-metrics");
    begin_token(&mut c, &scope, Some(TOKEN));
    begin_token(&mut c, &scope, Some(TOKEN));
    begin_token(&mut c, &scope, None);
    let row = c
        .query_one(
            "SELECT claimed_total, in_progress_total FROM idem_metrics() \
             WHERE scope = $1 AND owner = session_user::regrole",
            &[&scope],
        )
        .unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), Some(2));
    assert_eq!(row.get::<_, Option<i64>>(1), Some(1));
}
