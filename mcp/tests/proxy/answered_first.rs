//! The first caller gets the server's answer as soon as the server gives it; the record is
//! written meanwhile. A host that ends a stdio proxy right after its last answer (stdin
//! closed, or SIGTERM) still finds that call recorded, so that its retry in the next
//! session is a replay; and a duplicate sent right after the answer gets the same result.

use serde_json::json;

use crate::common::raw_stdio::{record_state, records_db, End, StdioProxy};
use crate::common::*;

/// Rounds per way of ending: each ends the proxy within a fraction of a millisecond of the
/// answer, before the completion's commit, unless the proxy waits for it.
const ROUNDS: usize = 8;

fn send_email(id: u64, key: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "send_email",
        "arguments": {"to": "ada@example.com", "subject": key},
        "_meta": {"pg-idempotency/key": key}}})
    .to_string()
}

#[tokio::test]
async fn a_call_answered_is_recorded_before_the_proxy_exits() {
    if Parts::python_or_skip().is_none() {
        return;
    }
    let db = records_db().await;
    for how in [End::StdinClosed, End::Terminated] {
        for round in 0..ROUNDS {
            let case = format!("answered-first-{how:?}-{round}");
            let p = StdioProxy::start(&case).await.unwrap();
            let key = format!("exit-{round}");
            let mut p = p;
            let answer = p.reply(7, &send_email(7, &key)).await;
            let mark = &answer["result"]["_meta"]["pg-idempotency/call"];
            assert_eq!(mark["replayed"], false, "{answer}");
            let scope = mark["scope"].as_str().unwrap().to_string();
            let counting = p.counting.dir.clone();
            let status = p.end(how).await;
            assert!(status.success(), "{how:?}: the proxy exited with {status}");
            assert_eq!(
                record_state(&db, &scope, &key).await.as_deref(),
                Some("succeeded"),
                "{how:?}, round {round}: the answered call was not recorded when the proxy exited (its files: {})",
                counting.display()
            );
        }
    }
}

#[tokio::test]
async fn a_duplicate_sent_right_after_the_answer_is_a_replay() {
    let Some(mut p) = StdioProxy::start("answered-first-duplicate").await else {
        return;
    };
    for round in 0..ROUNDS as u64 {
        let key = format!("dup-{round}");
        let first = p.reply(100 + round, &send_email(100 + round, &key)).await;
        let again = p.reply(200 + round, &send_email(200 + round, &key)).await;
        let mark =
            |a: &serde_json::Value| a["result"]["_meta"]["pg-idempotency/call"]["replayed"].clone();
        assert_eq!(
            (mark(&first), mark(&again)),
            (json!(false), json!(true)),
            "{first}\n{again}"
        );
        assert_eq!(
            first["result"]["structuredContent"], again["result"]["structuredContent"],
            "{first}\n{again}"
        );
    }
    assert_eq!(p.counting.count("send_email"), ROUNDS);
    p.stop().await;
}
