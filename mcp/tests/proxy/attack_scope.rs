//! Attacks on the scope a call is recorded under: a tenant that names itself or its tool so
//! that its scope is another tenant's, a tool the upstream never listed, a tool name
//! outside the specification's rules, and a record of the scope form before this one.
//! Each runs the real proxy in front of the counting server; the counting server's log
//! says which effects ran, the database which records exist.

use crate::common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A proxy over stdio for `principal`, in front of a counting server named `server` that
/// also lists `aliases` as names of send_email.
async fn proxy_for(c: &Counting, server: &str, principal: &str, aliases: &str) -> Client {
    let rest = format!(
        "[front]\nprincipal = {}\n{}",
        toml_str(principal),
        c.upstream_stdio(server)
    );
    let config = write_config(&c.dir, &rest);
    let mut env = c.env();
    env.push(("COUNTING_ALIASES".into(), aliases.into()));
    stdio_client(&config, &env).await
}

async fn db() -> tokio_postgres::Client {
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db
}

/// The record's state under (scope, key), if there is one.
async fn state(db: &tokio_postgres::Client, scope: &str, key: &str) -> Option<String> {
    // Unnamed statements (query_typed): the suite runs through a pooler in transaction mode too.
    db.query_typed(
        "SELECT state::text FROM idem_lookup($1, $2)",
        &[
            (&scope, tokio_postgres::types::Type::TEXT),
            (&key, tokio_postgres::types::Type::TEXT),
        ],
    )
    .await
    .unwrap()
    .first()
    .map(|r| r.get::<_, String>(0))
}

/// The scopes `idem_metrics()` shows that name `server` (its counters stay after a record
/// is gone, on the extension: a scope that was ever claimed shows).
async fn metrics_scopes(db: &tokio_postgres::Client, server: &str) -> Vec<String> {
    db.query_typed(
        "SELECT scope FROM idem_metrics() WHERE strpos(scope, $1) > 0",
        &[(&server, tokio_postgres::types::Type::TEXT)],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<_, String>(0))
    .collect()
}

/// `corp.com` calling `send_email@alice` (a name the server lists) asks for what
/// `alice@corp.com` calling `send_email` asked: under `server/tool@principal` both were
/// one scope, and the attacker got alice's result instead of its own effect.
#[tokio::test]
async fn tool_name_with_at_cannot_replay_another_principals_call() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-at-replay");
    let server = pg_idempotency_tests::scope("mail");
    let args = json!({"to": "boss@corp.com", "subject": "raise"});
    let alice = proxy_for(&c, &server, "alice@corp.com", "send_email@alice").await;
    let hers = call(&alice, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(mark(&hers)["replayed"], false, "{hers:?}");
    let attacker = proxy_for(&c, &server, "corp.com", "send_email@alice").await;
    let theirs = call(&attacker, "send_email@alice", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(
        mark(&theirs)["replayed"],
        false,
        "the attacker was answered with alice's call: {theirs:?}"
    );
    assert_ne!(mark(&theirs)["scope"], mark(&hers)["scope"]);
    assert_eq!(c.count("send_email"), 2, "each principal's call ran once");
    alice.cancel().await.unwrap();
    attacker.cancel().await.unwrap();
}

/// The same pair the other way round: the attacker claims first, and alice's own call
/// must still run (under the old form it was answered with the attacker's result, and
/// her email was never sent).
#[tokio::test]
async fn tool_name_with_at_cannot_claim_another_principals_call_first() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-at-claim");
    let server = pg_idempotency_tests::scope("mail");
    let args = json!({"to": "boss@corp.com", "subject": "raise"});
    let attacker = proxy_for(&c, &server, "corp.com", "send_email@alice").await;
    let theirs = call(&attacker, "send_email@alice", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(mark(&theirs)["replayed"], false, "{theirs:?}");
    let alice = proxy_for(&c, &server, "alice@corp.com", "send_email@alice").await;
    let hers = call(&alice, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(
        mark(&hers)["replayed"],
        false,
        "alice's call was answered with the attacker's: {hers:?}"
    );
    assert_eq!(c.count("send_email"), 2, "alice's own email was sent");
    alice.cancel().await.unwrap();
    attacker.cancel().await.unwrap();
}

/// A principal spelled `#<24 hex>` (the first 24 hex digits of a long principal's
/// SHA-256) does not reach the long principal's hashed scope.
#[tokio::test]
async fn hash_spelled_principal_does_not_reach_a_long_principals_scope() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-hash");
    let server = pg_idempotency_tests::scope("mail");
    let long = format!("tenant-{}", "x".repeat(200));
    let digest: String = Sha256::digest(long.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let spelled = format!("#{}", &digest[..24]);
    let args = json!({"to": "a@x", "subject": "s"});
    let victim = proxy_for(&c, &server, &long, "").await;
    let first = call(&victim, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(mark(&first)["replayed"], false, "{first:?}");
    let attacker = proxy_for(&c, &server, &spelled, "").await;
    let theirs = call(&attacker, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(
        mark(&theirs)["replayed"],
        false,
        "the attacker was answered with the long principal's call: {theirs:?}"
    );
    assert_ne!(mark(&theirs)["scope"], mark(&first)["scope"]);
    assert_eq!(c.count("send_email"), 2);
    victim.cancel().await.unwrap();
    attacker.cancel().await.unwrap();
}

/// A tool the upstream never listed is refused with the specification's code, before the
/// store is touched: no record, no scope in the metrics, nothing ran upstream.
#[tokio::test]
async fn unknown_tool_is_refused_before_the_store() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-unknown");
    let server = pg_idempotency_tests::scope("mail");
    let client = proxy_for(&c, &server, "local", "").await;
    let db = db().await;
    for _ in 0..3 {
        let refused = call(
            &client,
            "no_such_tool",
            json!({"to": "a@x", "subject": "s"}),
            key_meta("u-1"),
        )
        .await
        .unwrap_err();
        assert_eq!(
            refused.code,
            rmcp::model::ErrorCode::INVALID_PARAMS,
            "{refused:?}"
        );
        let data = refused.data.clone().unwrap_or(Value::Null);
        assert_eq!(data["kind"], "unknown_tool", "{refused:?}");
        assert_eq!(data["tool"], "no_such_tool");
        assert!(data["hint"].is_string());
    }
    for scope in [
        pg_idempotency_mcp::scope::scope_of(&server, "no_such_tool", "local"),
        format!("{server}/no_such_tool@local"),
    ] {
        assert_eq!(state(&db, &scope, "u-1").await, None, "{scope}");
    }
    assert_eq!(metrics_scopes(&db, &server).await, Vec::<String>::new());
    assert!(c.effects().is_empty(), "{:?}", c.effects());
    // A listed tool still runs.
    let ok = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(mark(&ok)["replayed"], false);
    assert_eq!(c.count("send_email"), 1);
    client.cancel().await.unwrap();
}

/// A thousand invented tool names, sent together: every one refused as unknown, none
/// reaching the store or the server (so none is registered or gets a scope), and the
/// session still calls a listed tool afterwards. (The bound on the registered scopes
/// itself is `proxy.rs`'s unit test.)
#[tokio::test]
async fn a_thousand_invented_names_leave_nothing() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-invented");
    let server = pg_idempotency_tests::scope("mail");
    let client = proxy_for(&c, &server, "local", "").await;
    let db = db().await;
    // Fifty at a time, as a busy host would send them.
    let mut refused = 0;
    for batch in 0..20 {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..50 {
            let peer = client.peer().clone();
            let name = format!("invented_{}", batch * 50 + i);
            set.spawn(async move {
                peer.call_tool(params(&name, json!({"to": "a@x", "subject": "s"}), None))
                    .await
            });
        }
        while let Some(answer) = set.join_next().await {
            match answer.unwrap() {
                Err(rmcp::ServiceError::McpError(e)) => {
                    assert_eq!(e.data.as_ref().unwrap()["kind"], "unknown_tool", "{e:?}");
                    refused += 1;
                }
                other => panic!("an invented tool was not refused: {other:?}"),
            }
        }
    }
    assert_eq!(refused, 1000);
    assert_eq!(metrics_scopes(&db, &server).await, Vec::<String>::new());
    assert!(c.effects().is_empty(), "{:?}", c.effects());
    let ok = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(mark(&ok)["replayed"], false);
    client.cancel().await.unwrap();
}

/// A name outside the specification's rules (1-128 of A-Z a-z 0-9 _ - .) that the server
/// does not list is refused, whatever its length, before the store or the server sees it.
#[tokio::test]
async fn invalid_tool_name_is_refused_before_the_store() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-invalid");
    let server = pg_idempotency_tests::scope("mail");
    let client = proxy_for(&c, &server, "local", "").await;
    let db = db().await;
    let huge = "n".repeat(10_000);
    for name in ["send_email@alice", "send email", "", huge.as_str()] {
        let refused = call(
            &client,
            name,
            json!({"to": "a@x", "subject": "s"}),
            key_meta("i-1"),
        )
        .await
        .unwrap_err();
        assert_eq!(
            refused.code,
            rmcp::model::ErrorCode::INVALID_PARAMS,
            "{name:.40}: {refused:?}"
        );
        let data = refused.data.clone().unwrap_or(Value::Null);
        assert_eq!(data["kind"], "invalid_tool_name", "{refused:?}");
        assert!(
            refused.message.len() < 200,
            "the name is not echoed: {}",
            refused.message
        );
    }
    assert_eq!(metrics_scopes(&db, &server).await, Vec::<String>::new());
    assert!(c.effects().is_empty(), "{:?}", c.effects());
    client.cancel().await.unwrap();
}

/// A record written under the scope form before this one (`server/tool@principal`) is not
/// read: the call runs again once (docs/mcp.md, "Scope and principal": the cut), rather
/// than keep the old form's collisions open for a ttl.
#[tokio::test]
async fn old_form_record_is_not_replayed() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "atk-old-form");
    let server = pg_idempotency_tests::scope("mail");
    let args = json!({"to": "a@x", "subject": "before the upgrade"});
    let old = format!("{server}/send_email@local");
    let db = db().await;
    let row = db
        .query_typed(
            "SELECT outcome, fence FROM idem_begin(scope => $1, key => 'old-1', request => $2::text::jsonb)",
            &[(&old, tokio_postgres::types::Type::TEXT), (&args.to_string(), tokio_postgres::types::Type::TEXT)],
        )
        .await
        .unwrap()
        .remove(0);
    assert_eq!(row.get::<_, String>(0), "claimed");
    let fence: i64 = row.get(1);
    let stored = json!({"content": [{"type": "text", "text": "{\"sent\": 999}"}], "structuredContent": {"sent": 999, "to": "a@x", "message_id": null}, "isError": false});
    db.query_typed(
        "SELECT state::text FROM idem_complete($1, 'old-1', $2, $3::text::jsonb)",
        &[
            (&old, tokio_postgres::types::Type::TEXT),
            (&fence, tokio_postgres::types::Type::INT8),
            (&stored.to_string(), tokio_postgres::types::Type::TEXT),
        ],
    )
    .await
    .unwrap();
    let client = proxy_for(&c, &server, "local", "").await;
    let r = call(&client, "send_email", args.clone(), key_meta("old-1"))
        .await
        .unwrap();
    assert_eq!(
        mark(&r)["replayed"],
        false,
        "the old form's record was replayed: {r:?}"
    );
    assert_eq!(structured(&r)["sent"], 1, "{r:?}");
    assert_eq!(c.count("send_email"), 1, "the call ran under the new form");
    assert_eq!(
        state(&db, &old, "old-1").await.as_deref(),
        Some("succeeded"),
        "the old record is left to expire with its ttl"
    );
    client.cancel().await.unwrap();
}
