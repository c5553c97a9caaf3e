//! The proxy's defaults per tool, with no configuration of the tool: a tool the server
//! lists without annotations (as most servers do) passes, so a read answers the present; a
//! tool annotated as a write is deduplicated; `tools/list` says which, how old an answer can
//! be, and what a takeover of a call that may have acted does.

use crate::common::*;
use rmcp::model::Tool;
use serde_json::{json, Value};

/// The proxy's mark on each listed tool.
fn policies(tools: &[Tool]) -> impl Fn(&str) -> Value + '_ {
    move |name| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        t.meta.as_ref().unwrap().0["pg-idempotency/policy"].clone()
    }
}

/// count_emails listed bare: a read with default settings sees the write made between two
/// reads; send_email, annotated as a write, is still deduplicated by default.
#[tokio::test]
async fn an_unannotated_read_sees_fresh_data_and_a_write_is_deduplicated() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "fresh-read");
    let mut env = c.env();
    env.push(("COUNTING_BARE".into(), "count_emails".into()));
    let config = write_config(
        &c.dir,
        &c.upstream_stdio(&pg_idempotency_tests::scope("mail")),
    );
    let client = stdio_client(&config, &env).await;

    let count = |r: &rmcp::model::CallToolResult| structured(r)["count"].clone();
    let before = call(&client, "count_emails", json!({}), None)
        .await
        .unwrap();
    assert_eq!(count(&before), 0);
    let args = json!({"to": "ada@example.com", "subject": "hello"});
    let sent = call(&client, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(mark(&sent)["replayed"], false);
    let after = call(&client, "count_emails", json!({}), None)
        .await
        .unwrap();
    assert_eq!(
        count(&after),
        1,
        "the read was answered from the past: {after:?}"
    );
    // Neither read went through the store.
    assert!(mark(&before).is_null(), "{before:?}");
    assert!(mark(&after).is_null(), "{after:?}");
    // The write's repeat is a replay: no second email, and the read says so.
    let again = call(&client, "send_email", args, None).await.unwrap();
    assert_eq!(mark(&again)["replayed"], true);
    assert_eq!(unmarked(&again), unmarked(&sent));
    let last = call(&client, "count_emails", json!({}), None)
        .await
        .unwrap();
    assert_eq!(count(&last), 1);
    assert_eq!(c.count("send_email"), 1);

    // The listing says why, and how old an answer can be.
    let tools = client.list_all_tools().await.unwrap();
    let bare = tools.iter().find(|t| t.name == "count_emails").unwrap();
    assert!(bare.annotations.is_none(), "{bare:?}");
    let policy = policies(&tools);
    assert_eq!(
        policy("count_emails"),
        json!({"deduplicated": false, "decidedBy": "no annotations", "replaysFor": "0s"})
    );
    assert_eq!(
        policy("send_email"),
        json!({
            "deduplicated": true,
            "decidedBy": "annotated effect",
            "replaysFor": pg_idempotency_mcp::listing::STORE_TTL,
            "onUnknownOutcome": "refuse",
            "onUnknownOutcomeDecidedBy": "default",
        })
    );

    client.cancel().await.unwrap();
}

/// A server that annotates nothing: every tool passes unless the configuration names it;
/// a tool named `mode = "dedupe"` is deduplicated, refuses a takeover by default, and its
/// configured ttl is the bound the listing states.
#[tokio::test]
async fn a_bare_server_s_writes_are_named_in_the_configuration() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "bare-server");
    let mut env = c.env();
    env.push(("COUNTING_BARE".into(), "*".into()));
    let rest = format!(
        "{}\n[tools.send_email]\nmode = \"dedupe\"\nttl = \"7d\"\n",
        c.upstream_stdio(&pg_idempotency_tests::scope("mail"))
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &env).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().all(|t| t.annotations.is_none()), "{tools:?}");
    let policy = policies(&tools);
    for tool in ["count_emails", "find_email", "reject"] {
        assert_eq!(policy(tool)["deduplicated"], false, "{tool}");
        assert_eq!(policy(tool)["decidedBy"], "no annotations", "{tool}");
    }
    assert_eq!(
        policy("send_email"),
        json!({
            "deduplicated": true,
            "decidedBy": "config",
            "replaysFor": "7d",
            "onUnknownOutcome": "refuse",
            "onUnknownOutcomeDecidedBy": "default",
        })
    );
    let args = json!({"to": "a@x", "subject": "s"});
    for replayed in [false, true] {
        let r = call(&client, "send_email", args.clone(), None)
            .await
            .unwrap();
        assert_eq!(mark(&r)["replayed"], replayed);
    }
    assert_eq!(c.count("send_email"), 1);
    // reject has an effect, but its server did not say so, nor did the configuration.
    for _ in 0..2 {
        call(&client, "reject", json!({"reason": "no"}), None)
            .await
            .unwrap();
    }
    assert_eq!(c.count("reject"), 2);
    client.cancel().await.unwrap();
}
