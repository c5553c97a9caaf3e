//! Extension only: loaded without shared_preload_libraries (by a session's first call, or
//! CREATE EXTENSION), the library says so once per backend, and idem_metrics() counts
//! outcomes all the same (0.8.0: a table's counts, not shared memory's). Runs on a throwaway
//! server of the same version that preloads nothing.

use std::sync::{Arc, Mutex};

use pg_idempotency_tests::*;

/// (SQLSTATE, message, hint) of every notice or warning a session received.
type Notices = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

fn connect_listening(dsn: &str) -> (Client, Notices) {
    let notices: Notices = Arc::default();
    let sink = notices.clone();
    let mut config: postgres::Config = dsn.parse().unwrap();
    config.notice_callback(move |n| {
        sink.lock().unwrap().push((
            n.code().code().to_string(),
            n.message().to_string(),
            n.hint().map(str::to_string),
        ))
    });
    (config.connect(NoTls).unwrap(), notices)
}

fn warnings(n: &Notices) -> Vec<(String, String, Option<String>)> {
    n.lock().unwrap().clone()
}

#[test]
fn without_preloading_each_backend_is_warned_once_and_outcomes_are_counted() {
    if backend() == Backend::Portable {
        skip(
            Skip::NotApplicable,
            "extension only: the portable variant has no library to preload",
        );
        return;
    }
    let server = TempCluster::start("no-preload", &[]);
    let (mut c, notices) = connect_listening(&server.dsn("postgres"));
    c.batch_execute("CREATE EXTENSION pg_idempotency").unwrap();
    c.query_one("SELECT outcome FROM idem_begin('preload', 'k')", &[])
        .unwrap();
    c.query_one("SELECT outcome FROM idem_begin('preload', 'k')", &[])
        .unwrap();
    let seen = warnings(&notices);
    assert_eq!(seen.len(), 1, "one warning per backend: {seen:?}");
    let (code, message, hint) = &seen[0];
    assert_eq!(code, "01000");
    assert_eq!(
        message,
        "pg_idempotency is loaded without shared_preload_libraries"
    );
    assert!(
        hint.as_deref()
            .is_some_and(|h| h.contains("Add pg_idempotency to shared_preload_libraries")),
        "{hint:?}"
    );

    let row = c
        .query_one(
            "SELECT claimed_total, note FROM idem_metrics() WHERE scope = 'preload'",
            &[],
        )
        .unwrap();
    // Counted all the same (0.8.0): the counts are a table's, not shared memory's.
    let (claimed, note): (Option<i64>, Option<String>) = (row.get(0), row.get(1));
    assert_eq!((claimed, note), (Some(1), None));

    // Another backend: nothing until it first uses the extension, then once.
    let (mut other, notices) = connect_listening(&server.dsn("postgres"));
    other.batch_execute("SELECT 1").unwrap();
    assert_eq!(warnings(&notices).len(), 0);
    other
        .query_one("SELECT outcome FROM idem_begin('preload', 'other')", &[])
        .unwrap();
    other
        .query_one("SELECT count(*) FROM idem_lookup('preload', 'other')", &[])
        .unwrap();
    assert_eq!(warnings(&notices).len(), 1, "{:?}", warnings(&notices));
}

#[test]
fn preloaded_there_is_no_warning_and_no_note() {
    if backend() == Backend::Portable {
        skip(
            Skip::NotApplicable,
            "extension only: the portable variant has no library to preload",
        );
        return;
    }
    let (mut c, notices) = connect_listening(&dsn());
    let s = scope("preloaded");
    c.query_one("SELECT outcome FROM idem_begin($1, 'k')", &[&s])
        .unwrap();
    let row = c
        .query_one(
            "SELECT claimed_total, note FROM idem_metrics() WHERE scope = $1",
            &[&s],
        )
        .unwrap();
    let (claimed, note): (Option<i64>, Option<String>) = (row.get(0), row.get(1));
    assert_eq!(note, None);
    // Counted under its own scope, however many scopes the suites made before (0.8.0: no
    // '(other scopes)' fold).
    assert_eq!(claimed, Some(1));
    assert_eq!(warnings(&notices), vec![]);
}
