//! Outcome counts that never fold (0.8.0): idem_metrics() counts each (owner, scope) pair on
//! its own, however many there are, on both backends; refusals and the client's marks are
//! counted; the one bound left (pg_idempotency.metrics_scope_limit, the rows a scrape
//! shows) folds visibly, saying how many pairs a folded row holds. Each test counts as a
//! role of its own, whose idem_metrics() rows are its own only.

use pg_idempotency_tests::attack::TestRole;
use pg_idempotency_tests::*;

const SCOPES: i64 = 100_000;

/// The counts of one scope, as `owner`'s session sees them: claimed, replay, in_progress,
/// mismatch, refused, unrecorded, outcome_unknown, folded_scopes.
fn counts(c: &mut Client, scope: &str) -> Vec<i64> {
    let row = c
        .query_one(
            "SELECT claimed_total, replay_total, in_progress_total, mismatch_total, \
                    refused_total, unrecorded_total, outcome_unknown_total, folded_scopes \
             FROM idem_metrics() WHERE scope = $1",
            &[&scope],
        )
        .unwrap_or_else(|e| panic!("idem_metrics() of {scope}: {e}"));
    (0..8).map(|i| row.get::<_, i64>(i)).collect()
}

fn user(name: &str) -> TestRole {
    TestRole::create(&dsn(), name, "IN ROLE idempotency_user")
}

/// A session of `role` whose every call writes its counts (the extension otherwise keeps
/// the counts of answers that write nothing for up to count_flush_interval_ms; the
/// portable variant writes each in its call's transaction and ignores the setting).
fn counted(role: &TestRole) -> Client {
    let mut c = role.session();
    set(&mut c, "pg_idempotency.count_flush_interval_ms", "0");
    c
}

/// Sets a setting for the session. A library that lacks it (0.7.0's, which reserves the
/// prefix) refuses it: ignored, so that the test fails on what it checks, not here.
fn set(c: &mut Client, name: &str, value: &str) {
    let _ = c.execute("SELECT set_config($1, $2, false)", &[&name, &value]);
}

#[test]
fn a_hundred_thousand_scopes_are_each_counted_with_no_fold() {
    let role = user("counts_many");
    let mut c = counted(&role);
    let prefix = scope("many");
    // One statement: 100,000 claims, each in a scope of its own, then a replay of each.
    // The leases outlast both statements: a loaded machine takes over a minute for one,
    // and a lease that lapsed (60 s by default) would be claimed again, not answered as
    // running.
    for _ in 0..2 {
        c.execute(
            "SELECT count(*) FROM generate_series(1, $2::bigint) AS i, \
                 LATERAL idem_begin($1 || '/' || i, 'k', lease => interval '1 hour') AS b",
            &[&prefix, &SCOPES],
        )
        .unwrap();
    }
    // Read with the columns every release has: each scope its own row, counted exactly.
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE scope LIKE $1 || '/%'), \
                    count(*) FILTER (WHERE scope LIKE $1 || '/%' AND claimed_total = 1 \
                                     AND replay_total = 0 AND in_progress_total = 1), \
                    count(*) FILTER (WHERE scope = '(other scopes)') \
             FROM idem_metrics()",
            &[&prefix],
        )
        .unwrap();
    let (rows, exact, other): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (rows, exact, other),
        (SCOPES, SCOPES, 0),
        "every scope its own row, each counted once as claimed and once as running, none in \
         '(other scopes)'"
    );
    let folded: i64 = c
        .query_one("SELECT sum(folded_scopes)::bigint FROM idem_metrics()", &[])
        .unwrap()
        .get(0);
    assert_eq!(folded, 0, "no row says it folds others");
}

#[test]
fn refusals_are_counted_per_scope() {
    let role = user("counts_refusals");
    let mut c = counted(&role);
    let (a, b) = (scope("refusals-a"), scope("refusals-b"));
    // A batch answers its refusals as items' outcomes: counted on both backends.
    for s in [&a, &b] {
        let f: i64 = c
            .query_one(
                "SELECT fence FROM idem_begin($1, 'done', '{\"n\": 1}'::jsonb)",
                &[s],
            )
            .unwrap()
            .get(0);
        c.execute(
            "SELECT idem_complete($1, 'done', $2, '{}'::jsonb, true)",
            &[s, &f],
        )
        .unwrap();
    }
    c.execute(
        "SELECT * FROM idem_begin_batch($1, ARRAY['done'], ARRAY['{\"n\": 2}'::jsonb])",
        &[&a],
    )
    .unwrap();
    for _ in 0..2 {
        c.execute(
            "SELECT * FROM idem_begin_batch($1, ARRAY['done'], on_cache_hit => 'fail_fast')",
            &[&b],
        )
        .unwrap();
    }
    assert_eq!(counts(&mut c, &a)[3..5], [1, 0], "a: one mismatch refused");
    assert_eq!(counts(&mut c, &b)[3..5], [0, 2], "b: two repeats refused");

    // A single call raises its refusal (IK001, IK002), which rolls its transaction back.
    let mismatch = c
        .query_one(
            "SELECT outcome FROM idem_begin($1, 'done', '{\"n\": 3}'::jsonb)",
            &[&a],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&mismatch), "IK001");
    let refused = c
        .query_one(
            "SELECT outcome FROM idem_begin($1, 'done', on_cache_hit => 'fail_fast')",
            &[&b],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&refused), "IK002");
    // The session's next call that succeeds writes what it counted.
    c.execute("SELECT idem_begin($1, 'next')", &[&a]).unwrap();
    match backend() {
        // The extension counts the refusal in the backend's memory, out of the
        // transaction, and writes it with the next call.
        Backend::Extension => {
            assert_eq!(counts(&mut c, &a)[3..5], [2, 0]);
            assert_eq!(counts(&mut c, &b)[3..5], [0, 3]);
        }
        // Plain SQL keeps nothing a rollback undoes: the raised refusal is not counted,
        // and the note says so.
        Backend::Portable => {
            assert_eq!(counts(&mut c, &a)[3..5], [1, 0]);
            assert_eq!(counts(&mut c, &b)[3..5], [0, 2]);
            let note: Option<String> = c
                .query_one("SELECT note FROM idem_metrics() WHERE scope = $1", &[&a])
                .unwrap()
                .get(0);
            assert!(
                note.as_deref().is_some_and(|n| n.contains("not counted")),
                "{note:?}"
            );
        }
    }
}

#[test]
fn the_client_s_marks_are_counted() {
    let role = user("counts_marks");
    let mut c = counted(&role);
    let s = scope("marks");
    let marks = [
        ("u1", r#"{"pg_idempotency": {"unrecorded": "too large"}}"#),
        (
            "u2",
            r#"{"pg_idempotency": {"unrecorded": "holds U+0000"}}"#,
        ),
        (
            "o1",
            r#"{"pg_idempotency": {"outcome_unknown": "taken over"}}"#,
        ),
        // Not marks: another member beside it, another word, a plain result.
        ("n1", r#"{"pg_idempotency": {"unrecorded": "x"}, "id": 1}"#),
        ("n2", r#"{"pg_idempotency": {"other": "x"}}"#),
        ("n3", r#"{"sent": true}"#),
    ];
    for (key, response) in marks {
        let f = begin(&mut c, &s, key).fence.unwrap();
        complete(&mut c, &s, key, f, response).unwrap();
        // A completion repeated under its fence (its answer was lost) writes nothing, and
        // is not counted again.
        complete(&mut c, &s, key, f, response).unwrap();
    }
    // The batch form: one mark among two completions.
    let f1 = begin(&mut c, &s, "b1").fence.unwrap();
    let f2 = begin(&mut c, &s, "b2").fence.unwrap();
    c.execute(
        "SELECT * FROM idem_complete_batch($1, ARRAY['b1', 'b2'], ARRAY[$2, $3]::bigint[], \
             ARRAY['{\"pg_idempotency\": {\"outcome_unknown\": \"refused\"}}', '{}']::jsonb[])",
        &[&s, &f1, &f2],
    )
    .unwrap();
    assert_eq!(
        counts(&mut c, &s)[5..7],
        [2, 2],
        "two unrecorded marks, two outcome_unknown marks"
    );
}

#[test]
fn the_scope_limit_folds_visibly() {
    let role = user("counts_limit");
    let mut c = counted(&role);
    let prefix = scope("limit");
    // Five scopes, the busiest first: scope i has 6 - i claims.
    for i in 1..=5 {
        for k in 0..(6 - i) {
            begin(&mut c, &format!("{prefix}/{i}"), &format!("k{k}"));
        }
    }
    set(&mut c, "pg_idempotency.metrics_scope_limit", "3");
    let mut rows: Vec<(String, i64, i64)> = c
        .query(
            "SELECT scope, claimed_total, folded_scopes FROM idem_metrics()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        vec![
            ("(other scopes)".to_string(), 2 + 1, 2),
            (format!("{prefix}/1"), 5, 0),
            (format!("{prefix}/2"), 4, 0),
            (format!("{prefix}/3"), 3, 0),
        ],
        "the three busiest kept, the other two folded into one row that says so"
    );
    set(&mut c, "pg_idempotency.metrics_scope_limit", "0");
    let all: i64 = c
        .query_one("SELECT count(*) FROM idem_metrics()", &[])
        .unwrap()
        .get(0);
    assert_eq!(all, 5, "no limit: every scope its own row");
}

#[test]
fn a_rolled_back_claim_is_counted_by_the_extension_only() {
    let role = user("counts_rollback");
    let mut c = counted(&role);
    let s = scope("rollback");
    let mut t = c.transaction().unwrap();
    t.execute("SELECT idem_begin($1, 'k')", &[&s]).unwrap();
    t.rollback().unwrap();
    // The same call again: claimed again, since the first claim rolled back.
    assert_eq!(begin(&mut c, &s, "k").outcome, "claimed");
    let claimed = counts(&mut c, &s)[0];
    match backend() {
        // Counted as answered: the caller was told `claimed` and may have acted on it.
        Backend::Extension => assert_eq!(claimed, 2),
        // Counted as committed, like the record itself.
        Backend::Portable => assert_eq!(claimed, 1),
    }
}

#[test]
fn counting_off_counts_nothing() {
    let role = user("counts_off");
    let mut c = counted(&role);
    let s = scope("off");
    begin(&mut c, &s, "a");
    set(&mut c, "pg_idempotency.count_outcomes", "0");
    begin(&mut c, &s, "b");
    begin(&mut c, &s, "b");
    let row = c
        .query_one(
            "SELECT claimed_total, in_progress_total, note FROM idem_metrics() WHERE scope = $1",
            &[&s],
        )
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (1, 0));
    let note: Option<String> = row.get(2);
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("count_outcomes = 0")),
        "{note:?}"
    );
}

#[test]
fn answers_that_write_nothing_are_written_with_the_next_write() {
    let role = user("counts_interval");
    let mut c = role.session();
    set(&mut c, "pg_idempotency.count_flush_interval_ms", "3600000");
    let s = scope("interval");
    begin(&mut c, &s, "a");
    begin(&mut c, &s, "a");
    begin(&mut c, &s, "a");
    // Another session of the same role reads what the table holds.
    let mut reader = role.session();
    let running = counts(&mut reader, &s)[2];
    match backend() {
        // Kept in the backend's memory: a duplicate stays a read.
        Backend::Extension => assert_eq!(running, 0),
        Backend::Portable => assert_eq!(running, 2),
    }
    // A claim writes a record anyway: the counts go with it.
    begin(&mut c, &s, "b");
    assert_eq!(counts(&mut reader, &s)[..3], [2, 0, 2]);
}

#[test]
fn only_the_client_s_marks_count_as_marks() {
    let role = user("counts_not_marks");
    let mut c = counted(&role);
    let s = scope("not-marks");
    let deep = format!(
        "{}{}",
        "{\"pg_idempotency\": ".repeat(200),
        "{\"unrecorded\": \"x\"}".to_string() + &"}".repeat(200)
    );
    let others = [
        // Shaped like a mark, with another member after it in the outer object.
        r#"{"pg_idempotency": {"unrecorded": "x"}, "zzzzzzzzzzzzzzzzzzzzzzzzzz": {"a": "b"}}"#,
        // The word in a string, a number too large for a double, deep nesting.
        r#"{"pg_idempotency": {"note": "\"unrecorded\": \"x\"", "n": 1e400}}"#,
        r#"{"pg_idempotency": {"unrecorded": 1}}"#,
        deep.as_str(),
    ];
    for (i, response) in others.into_iter().enumerate() {
        let key = format!("k{i}");
        let f = begin(&mut c, &s, &key).fence.unwrap();
        complete(&mut c, &s, &key, f, response).unwrap_or_else(|e| panic!("{response}: {e}"));
    }
    assert_eq!(counts(&mut c, &s)[5..7], [0, 0], "none of them is a mark");
}

#[test]
fn a_scrape_of_the_counts_alone_reads_no_record() {
    let role = user("counts_records_off");
    let mut c = counted(&role);
    let s = scope("records-off");
    begin(&mut c, &s, "a");
    begin(&mut c, &s, "a");
    set(&mut c, "pg_idempotency.metrics_records", "0");
    let row = c
        .query_one(
            "SELECT in_progress, expired, claimed_total, in_progress_total, note \
             FROM idem_metrics() WHERE scope = $1",
            &[&s],
        )
        .unwrap();
    let live: (Option<i64>, Option<i64>) = (row.get(0), row.get(1));
    let counted: (i64, i64) = (row.get(2), row.get(3));
    let note: Option<String> = row.get(4);
    assert_eq!(live, (None, None), "the records' columns are not read");
    assert_eq!(counted, (1, 1), "the counts are");
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("metrics_records = 0")),
        "{note:?}"
    );
}

/// The portable variant counts in a row per pair and process id: when the purge runs, the
/// rows of backends that have exited fold into one row per pair (slot 0), their sums
/// kept, so the table does not grow with every connection a pool ever opened. (The
/// extension's slots are its backends' numbers, bounded by max_connections.)
#[test]
fn the_counts_of_exited_backends_fold_into_one_row_at_purge() {
    if matches!(backend(), Backend::Extension) {
        skip(
            Skip::NotApplicable,
            "the extension counts in a row per backend number (bounded by max_connections): it has no rows of exited processes to fold",
        );
        return;
    }
    let role = user("counts_exited");
    let s = scope("exited");
    let mut pids: Vec<i32> = Vec::new();
    for i in 0..3 {
        let mut c = counted(&role);
        pids.push(c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0));
        assert_eq!(begin(&mut c, &s, &format!("k{i}")).outcome, "claimed");
    }
    let mut admin = connect();
    let rows = |admin: &mut Client| -> (i64, i64) {
        let row = admin
            .query_one(
                "SELECT count(*), coalesce(sum(claimed), 0)::bigint FROM idempotency.counts WHERE scope = $1",
                &[&s],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(rows(&mut admin), (3, 3), "a row per process that counted");
    wait_until(
        "the three sessions to exit",
        std::time::Duration::from_secs(30),
        || {
            let gone: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)",
                    &[&pids],
                )
                .unwrap()
                .get(0);
            gone == 0
        },
    );
    admin.execute("SELECT idem_purge_expired()", &[]).unwrap();
    assert_eq!(rows(&mut admin), (1, 3), "one row per pair, the sums kept");
    let mut c = counted(&role);
    assert_eq!(counts(&mut c, &s)[0], 3);
}
