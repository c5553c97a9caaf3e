//! Extension only: loaded without shared_preload_libraries (by a session's first call, or
//! CREATE EXTENSION), the library says so once per backend, and idem_metrics() says why its
//! counters are NULL. Runs on a throwaway server of the same version that preloads nothing.

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
fn without_preloading_each_backend_is_warned_once_and_metrics_say_why() {
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
    let (claimed, note): (Option<i64>, Option<String>) = (row.get(0), row.get(1));
    assert_eq!(claimed, None);
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("not in shared_preload_libraries")),
        "{note:?}"
    );

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
    // The claim is counted: under its scope, or, once the server's 512 counter slots are
    // taken (the suites' unique scopes fill them on a server that ran long enough), in
    // the overflow row `(other scopes)`.
    if claimed != Some(1) {
        assert_eq!(claimed, Some(0), "a scope without a slot reads 0");
        let overflow: Option<i64> = c
            .query_one(
                "SELECT sum(claimed_total)::bigint FROM idem_metrics() WHERE scope = '(other scopes)'",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(
            overflow.is_some_and(|n| n >= 1),
            "the claim counted nowhere: {overflow:?}"
        );
    }
    assert_eq!(warnings(&notices), vec![]);
}
