//! The proxy's behaviours, over stdio: an rmcp client starts the proxy, which starts the
//! counting server (the official Python SDK) behind it; the server's effect log counts what
//! really happened, and the records live in the database under test.

use crate::common::*;
use serde_json::json;

/// Three identical calls of a tool with an effect: one email; the repeats replay the first
/// result exactly, marked as replays.
#[tokio::test]
async fn repeats_run_once_and_replay_exactly() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "repeats");
    let name = pg_idempotency_tests::scope("mail");
    let config = write_config(&c.dir, &c.upstream_stdio(&name));
    let client = stdio_client(&config, &c.env()).await;
    let args = json!({"to": "ada@example.com", "subject": "hello"});
    let first = call(&client, "send_email", args.clone(), None)
        .await
        .unwrap();
    assert_eq!(mark(&first)["replayed"], false, "{first:?}");
    assert_eq!(structured(&first)["sent"], 1);
    for _ in 0..2 {
        let again = call(&client, "send_email", args.clone(), None)
            .await
            .unwrap();
        assert_eq!(mark(&again)["replayed"], true);
        assert_eq!(mark(&again)["key"], mark(&first)["key"]);
        assert_eq!(unmarked(&again), unmarked(&first));
    }
    assert_eq!(c.count("send_email"), 1);
    // Other arguments are another call.
    let other = call(
        &client,
        "send_email",
        json!({"to": "bob@example.com", "subject": "hello"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(mark(&other)["replayed"], false);
    assert_eq!(c.count("send_email"), 2);
    // The upstream was told the call's stable key.
    let effects = c.effects();
    assert_eq!(
        effects[0]["meta"]["pg-idempotency/upstream"]["key"],
        mark(&first)["key"]
    );
    assert!(effects[0]["meta"]["pg-idempotency/upstream"]["upstreamKey"].is_string());
    client.cancel().await.unwrap();
}

/// The key from `_meta` (ours and SEP-3182's spelling) wins over the arguments; the same key
/// with other arguments is refused; the JSON-RPC id plays no part.
#[tokio::test]
async fn keys_from_meta() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "meta");
    let name = pg_idempotency_tests::scope("mail");
    let config = write_config(&c.dir, &c.upstream_stdio(&name));
    let client = stdio_client(&config, &c.env()).await;
    let args = json!({"to": "ada@example.com", "subject": "hi"});
    let first = call(&client, "send_email", args.clone(), key_meta("k-1"))
        .await
        .unwrap();
    assert_eq!(mark(&first)["key"], "k-1");
    let sep = call(
        &client,
        "send_email",
        args.clone(),
        Some(json!({"idempotencyKey": "k-1"})),
    )
    .await
    .unwrap();
    assert_eq!(mark(&sep)["replayed"], true);
    // A new key is a new call, even with the same arguments.
    let second = call(&client, "send_email", args.clone(), key_meta("k-2"))
        .await
        .unwrap();
    assert_eq!(mark(&second)["replayed"], false);
    assert_eq!(c.count("send_email"), 2);
    // The same key, other arguments: refused, nothing sent.
    let reused = call(
        &client,
        "send_email",
        json!({"to": "eve@example.com", "subject": "hi"}),
        key_meta("k-1"),
    )
    .await
    .unwrap_err();
    assert_eq!(
        reused.code.0,
        pg_idempotency_mcp::answer::code::KEY_REUSED,
        "{reused:?}"
    );
    assert_eq!(reused.data.as_ref().unwrap()["kind"], "key_reused");
    // A blank key, or two different keys: invalid params, nothing sent.
    for meta in [
        json!({"pg-idempotency/key": " "}),
        json!({"pg-idempotency/key": "a", "idempotencyKey": "b"}),
    ] {
        let bad = call(&client, "send_email", args.clone(), Some(meta))
            .await
            .unwrap_err();
        assert_eq!(bad.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{bad:?}");
        assert!(bad.data.as_ref().unwrap()["hint"].is_string());
    }
    assert_eq!(c.count("send_email"), 2);
    client.cancel().await.unwrap();
}

/// `strategy = "explicit"`: the named argument is the key, and a repeat with other fields
/// replays (the Java framework's EXPLICIT); a call without it is refused.
#[tokio::test]
async fn explicit_key_field() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "explicit");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "{}\n[tools.send_email]\nstrategy = \"explicit\"\nkey_field = \"message_id\"\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    let first = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s", "message_id": "m-1"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(mark(&first)["key"], "m-1");
    let edited = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s (edited)", "message_id": "m-1"}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(mark(&edited)["replayed"], true);
    assert_eq!(unmarked(&edited), unmarked(&first));
    let missing = call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s"}),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(missing.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert_eq!(c.count("send_email"), 1);
    client.cancel().await.unwrap();
}

/// Reads pass through (their readOnlyHint), and `tools/list` says which tools are protected;
/// the configuration overrides an annotation.
#[tokio::test]
async fn reads_pass_and_the_listing_shows_the_policy() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "listing");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "{}\n[tools.reject]\nmode = \"pass\"\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    let tools = client.list_all_tools().await.unwrap();
    let policy = |n: &str| {
        let t = tools.iter().find(|t| t.name == n).unwrap();
        (
            t.meta.as_ref().unwrap().0["pg-idempotency/policy"].clone(),
            t.description.clone().unwrap_or_default().to_string(),
        )
    };
    let (send, send_text) = policy("send_email");
    assert_eq!(send["deduplicated"], true);
    assert_eq!(send["decidedBy"], "annotated effect");
    assert_eq!(send["onUnknownOutcome"], "refuse");
    assert!(send_text.ends_with(pg_idempotency_mcp::listing::SUFFIX));
    let (count, count_text) = policy("count_emails");
    assert_eq!(count["deduplicated"], false);
    assert_eq!(count["decidedBy"], "readOnlyHint");
    assert!(!count_text.contains("Safe to retry"));
    assert_eq!(policy("reject").0["decidedBy"], "config");
    // A read runs every time, unmarked.
    call(
        &client,
        "send_email",
        json!({"to": "a@x", "subject": "s"}),
        None,
    )
    .await
    .unwrap();
    for _ in 0..2 {
        let r = call(&client, "count_emails", json!({}), None)
            .await
            .unwrap();
        assert!(mark(&r).is_null());
        assert_eq!(structured(&r)["count"], 1);
    }
    // A tool the configuration passes runs every time though it has an effect.
    for _ in 0..2 {
        call(&client, "reject", json!({"reason": "no"}), None)
            .await
            .unwrap();
    }
    assert_eq!(c.count("reject"), 2);
    client.cancel().await.unwrap();
}

/// An `isError` result follows cache_failures; a JSON-RPC error is never kept.
#[tokio::test]
async fn failures_follow_cache_failures_and_errors_are_never_kept() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "failures");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "{}\n[tools.reject]\ncache_failures = true\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    let first = call(&client, "reject", json!({"reason": "card declined"}), None)
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(true));
    assert_eq!(mark(&first)["replayed"], false);
    let again = call(&client, "reject", json!({"reason": "card declined"}), None)
        .await
        .unwrap();
    assert_eq!(again.is_error, Some(true));
    assert_eq!(mark(&again)["replayed"], true);
    assert_eq!(unmarked(&again), unmarked(&first));
    assert_eq!(c.count("reject"), 1, "a cached failure replays");
    // rpc_error is deduplicated (annotated readOnlyHint: false), but its JSON-RPC error is
    // never kept: each repeat reaches the server, and gets the server's own error.
    for _ in 0..2 {
        let e = call(
            &client,
            "rpc_error",
            json!({"code": -32010, "message": "busy", "effect": true}),
            None,
        )
        .await
        .unwrap_err();
        assert_eq!(e.code.0, -32010);
        assert_eq!(e.message, "busy");
    }
    assert_eq!(c.count("rpc_error"), 2);
    client.cancel().await.unwrap();
    // Without cache_failures (the default), a failed call runs again.
    let c2 = Counting::new(&parts, &python, "failures-default");
    let config = write_config(
        &c2.dir,
        &c2.upstream_stdio(&pg_idempotency_tests::scope("mail")),
    );
    let client = stdio_client(&config, &c2.env()).await;
    for _ in 0..2 {
        let r = call(&client, "reject", json!({"reason": "declined"}), None)
            .await
            .unwrap();
        assert_eq!(mark(&r)["replayed"], false);
    }
    assert_eq!(c2.count("reject"), 2);
    client.cancel().await.unwrap();
}

/// A duplicate while the first call runs waits for it and replays its result; with a short
/// wait it is told to retry, with retryAfterMs.
#[tokio::test]
async fn a_duplicate_waits_then_replays() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "wait");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "{}\n[tools.send_email]\nwait = \"60s\"\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let first_client = stdio_client(&config, &c.env()).await;
    let second_client = stdio_client(&config, &c.env()).await;
    let args = json!({"to": "a@x", "subject": "s", "message_id": "w-1", "hold": true});
    let first = tokio::spawn({
        let args = args.clone();
        async move { call(&first_client, "send_email", args, None).await }
    });
    c.held("w-1").await;
    let second = tokio::spawn({
        let args = args.clone();
        async move { call(&second_client, "send_email", args, None).await }
    });
    // The second waits on the record's row (a lock the first holds): release the first
    // only once the second is waiting, seen in the database.
    wait_waiting().await;
    c.release();
    let first = first.await.unwrap().unwrap();
    let second = second.await.unwrap().unwrap();
    assert_eq!(mark(&second)["replayed"], true);
    assert_eq!(unmarked(&second), unmarked(&first));
    assert_eq!(c.count("send_email"), 1);
}

/// Waits until a session of the database under test (or of its partitions, through a
/// proxy) waits inside `idem_begin` (the duplicate's wait for the first call: the
/// extension's wait event, or the PL/pgSQL variant's pg_sleep).
async fn wait_waiting() {
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        // Unnamed (query_typed): the suite runs through a pooler in transaction mode too.
        let waiting: bool = db
            .query_typed(
                // Through a PL/Proxy proxy (scripts/sharded.sh) the duplicate waits in one of
                // its partitions, <proxy>_p0, _p1, ... on the same server.
                "SELECT count(*) > 0 FROM pg_stat_activity \
                 WHERE (datname = current_database() OR datname LIKE current_database() || '\\_p%') \
                 AND state = 'active' AND query LIKE '%idem_begin%' \
                 AND wait_event IN ('Extension', 'PgSleep') AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()[0]
            .get(0);
        if waiting {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited a minute for the duplicate to wait"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_short_wait_is_told_to_retry() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "short-wait");
    let name = pg_idempotency_tests::scope("mail");
    let rest = format!(
        "{}\n[tools.send_email]\nwait = \"50ms\"\n",
        c.upstream_stdio(&name)
    );
    let config = write_config(&c.dir, &rest);
    let first_client = stdio_client(&config, &c.env()).await;
    let second_client = stdio_client(&config, &c.env()).await;
    let args = json!({"to": "a@x", "subject": "s", "message_id": "w-2", "hold": true});
    let first = tokio::spawn({
        let args = args.clone();
        async move { call(&first_client, "send_email", args, None).await }
    });
    c.held("w-2").await;
    let busy = call(&second_client, "send_email", args.clone(), None)
        .await
        .unwrap_err();
    assert_eq!(
        busy.code.0,
        pg_idempotency_mcp::answer::code::IN_PROGRESS,
        "{busy:?}"
    );
    let data = busy.data.unwrap();
    assert_eq!(data["kind"], "in_progress");
    assert!(data["retryAfterMs"].as_u64().is_some(), "{data}");
    c.release();
    first.await.unwrap().unwrap();
    let after = call(&second_client, "send_email", args, None)
        .await
        .unwrap();
    assert_eq!(mark(&after)["replayed"], true);
    assert_eq!(c.count("send_email"), 1);
}

/// The principal is in the scope: the same call from two principals is two calls.
#[tokio::test]
async fn principals_never_share_a_call() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "principals");
    let name = pg_idempotency_tests::scope("mail");
    let args = json!({"to": "a@x", "subject": "s"});
    let mut marks = Vec::new();
    for principal in ["tenant-a", "tenant-b", "tenant-a"] {
        let rest = format!(
            "[front]\nprincipal = {}\n{}",
            toml_str(principal),
            c.upstream_stdio(&name)
        );
        let config = write_config(&c.dir, &rest);
        let client = stdio_client(&config, &c.env()).await;
        let r = call(&client, "send_email", args.clone(), None)
            .await
            .unwrap();
        marks.push(mark(&r));
        client.cancel().await.unwrap();
    }
    assert_eq!(c.count("send_email"), 2);
    assert_eq!(
        marks[0]["scope"],
        pg_idempotency_mcp::scope::scope_of(&name, "send_email", "tenant-a")
    );
    assert_eq!(
        marks[1]["scope"],
        pg_idempotency_mcp::scope::scope_of(&name, "send_email", "tenant-b")
    );
    assert_eq!(marks[2]["replayed"], true);
}
