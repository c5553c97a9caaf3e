//! Fault trials: the proxy killed mid-call, the upstream server killed mid-call, the
//! answer to the MCP client lost. Each holds the call at the server after its effect (the
//! counting server's hold), makes the fault happen, and retries the call with the same key
//! as an agent would; the server's effect log must show one effect per key.

use crate::common::lossy::Lossy;
use crate::common::*;
use serde_json::{json, Value};

/// The policy of these trials: a short lease (the takeover comes soon after the fault), a
/// long wait (which a retry does not sit through once the dead holder has stopped beating:
/// it is told when the lease lapses, and retries then), and `choice` when the outcome is
/// unknown (`None`: the default).
fn policy(choice: Option<&str>) -> String {
    let choice = choice
        .map(|c| format!("on_unknown_outcome = {c}\n"))
        .unwrap_or_default();
    format!("\n[tools.send_email]\nlease = \"2s\"\nwait = \"60s\"\n{choice}")
}

const RECONCILE: &str =
    "{ reconcile = { tool = \"find_email\", arguments = { message_id = \"/message_id\" } } }";

fn held_args(id: &str) -> Value {
    json!({"to": "a@x", "subject": "s", "message_id": id, "hold": true})
}

/// The proxy that held the call is killed; the retry reaches another replica (same
/// database), which takes the call over once its lease lapsed and asks the read tool:
/// found, so its answer is the read's, and nothing is sent again.
#[tokio::test]
async fn the_proxy_killed_mid_call_reconcile() {
    proxy_killed("reconcile", Some(RECONCILE), 1, |r| {
        let r = r.expect("the takeover answers the read's result");
        assert_eq!(mark(&r)["replayed"], true);
        assert_eq!(structured(&r)["found"], true, "{r:?}");
    })
    .await;
}

/// The same, with `refuse`: the retry is told the outcome is unknown; nothing is sent again.
#[tokio::test]
async fn the_proxy_killed_mid_call_refuse() {
    proxy_killed("refuse", Some("\"refuse\""), 1, |r| {
        let e = r.expect_err("a takeover under refuse is refused");
        assert_eq!(
            e.code.0,
            pg_idempotency_mcp::answer::code::OUTCOME_UNKNOWN,
            "{e:?}"
        );
    })
    .await;
}

/// With no `on_unknown_outcome`, a tool annotated as a write that is not idempotent
/// (send_email) refuses the takeover: one email, and an error that says what happened,
/// names the record (scope and key) and what to do; the record stays for an operator,
/// marked, and a later retry gets the same answer.
#[tokio::test]
async fn the_proxy_killed_mid_call_refuses_by_default() {
    proxy_killed("default", None, 1, |r| {
        let e = r.expect_err("a takeover is refused by default");
        assert_eq!(
            e.code.0,
            pg_idempotency_mcp::answer::code::OUTCOME_UNKNOWN,
            "{e:?}"
        );
        let data = e.data.expect("the error says what to do");
        assert_eq!(data["kind"], "outcome_unknown", "{data}");
        assert_eq!(data["key"], "pk-default", "{data}");
        assert!(data["scope"].is_string(), "{data}");
        let detail = data["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("not run"), "{data}");
        assert!(detail.contains("unresolved"), "{data}");
        let hint = data["hint"].as_str().unwrap_or_default();
        assert!(hint.contains("idem_resolve"), "{data}");
    })
    .await;
}

/// `on_unknown_outcome = "rerun"`, named: the takeover runs the call again (a second
/// email), as the configuration asked.
#[tokio::test]
async fn the_proxy_killed_mid_call_rerun_runs_again() {
    proxy_killed("rerun", Some("\"rerun\""), 2, |r| {
        let r = r.expect("the takeover runs the call again");
        assert_eq!(mark(&r)["replayed"], false, "{r:?}");
        assert_eq!(structured(&r)["sent"], 2, "{r:?}");
    })
    .await;
}

async fn proxy_killed(
    name: &str,
    choice: Option<&str>,
    effects: usize,
    check: impl FnOnce(Result<rmcp::model::CallToolResult, rmcp::model::ErrorData>),
) {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, &format!("proxy-killed-{name}"));
    let server = pg_idempotency_tests::scope("mail");
    let rest = format!("{}{}", c.upstream_stdio(&server), policy(choice));
    let config = write_config(&c.dir, &rest);
    let mut a = HttpProxy::start(&config, &c.env()).await;
    let b = HttpProxy::start(&config, &c.env()).await;
    let id = format!("pk-{name}");
    let to_a = a.client().await;
    let first = tokio::spawn({
        let (args, id) = (held_args(&id), id.clone());
        async move {
            let _ = to_a
                .peer()
                .call_tool(params("send_email", args, key_meta(&id)))
                .await;
        }
    });
    c.held(&id).await;
    a.kill().await;
    // Its caller may never hear: the connection died with the proxy.
    first.abort();
    // The orphaned server may answer now; no one hears it.
    c.release();
    let to_b = b.client().await;
    // The holder stopped beating: the retry is told when its lease lapses, and retries then.
    let retry = call_as_told(&to_b, "send_email", held_args(&id), key_meta(&id)).await;
    let refused = retry.is_err();
    check(retry);
    assert_eq!(c.count("send_email"), effects, "{:#?}", c.effects());
    if refused {
        // The refusal is kept for an operator: a later retry gets it again, and runs nothing.
        let again = call(&to_b, "send_email", held_args(&id), key_meta(&id))
            .await
            .expect_err("the refusal is kept");
        assert_eq!(
            again.code.0,
            pg_idempotency_mcp::answer::code::OUTCOME_UNKNOWN,
            "{again:?}"
        );
        assert_eq!(c.count("send_email"), effects, "{:#?}", c.effects());
    }
    to_b.cancel().await.unwrap();
}

/// The upstream server dies mid-call: the caller is told the outcome is unknown; its retry
/// (same key) reconnects, waits for the lease, takes the call over and asks the read tool.
#[tokio::test]
async fn the_upstream_killed_mid_call() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "upstream-killed");
    let server = pg_idempotency_tests::scope("mail");
    let rest = format!("{}{}", c.upstream_stdio(&server), policy(Some(RECONCILE)));
    let config = write_config(&c.dir, &rest);
    let client = stdio_client(&config, &c.env()).await;
    let id = "uk-1";
    let first = tokio::spawn({
        let client_peer = client.peer().clone();
        async move {
            client_peer
                .call_tool(params("send_email", held_args(id), key_meta(id)))
                .await
        }
    });
    c.held(id).await;
    let marker: Value =
        serde_json::from_str(&std::fs::read_to_string(c.hold.join(format!("held-{id}"))).unwrap())
            .unwrap();
    let pid = marker["pid"].as_i64().unwrap();
    let killed = std::process::Command::new("kill")
        .arg("-9")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    match first.await.unwrap() {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert_eq!(
                e.code.0,
                pg_idempotency_mcp::answer::code::UPSTREAM_LOST,
                "{e:?}"
            )
        }
        other => panic!("the call whose server died answered {other:?}"),
    }
    c.release();
    // The holder stopped beating: the retry is told when its lease lapses, and retries then.
    let retry = call_as_told(&client, "send_email", held_args(id), key_meta(id))
        .await
        .unwrap();
    assert_eq!(mark(&retry)["replayed"], true);
    assert_eq!(structured(&retry)["found"], true);
    assert_eq!(c.count("send_email"), 1, "{:#?}", c.effects());
    client.cancel().await.unwrap();
}

/// The answer to the MCP client is lost on its way (over HTTP): the client's retry with the
/// same key replays it.
#[tokio::test]
async fn the_answer_lost_on_the_way_to_the_client() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "answer-lost");
    let server = pg_idempotency_tests::scope("mail");
    let config = write_config(&c.dir, &c.upstream_stdio(&server));
    let proxy = HttpProxy::start(&config, &c.env()).await;
    let lossy = Lossy::start(proxy.port).await;
    let through = http_client(&format!("http://127.0.0.1:{}/mcp", lossy.port), &[]).await;
    let args = json!({"to": "a@x", "subject": "lost"});
    let lost = through
        .peer()
        .call_tool(params("send_email", args.clone(), key_meta("lost-1")))
        .await;
    assert!(lost.is_err(), "the answer reached the client: {lost:?}");
    assert!(lossy.lost.load(std::sync::atomic::Ordering::SeqCst));
    let retry_client = http_client(&format!("http://127.0.0.1:{}/mcp", lossy.port), &[]).await;
    let retry = call(&retry_client, "send_email", args, key_meta("lost-1"))
        .await
        .unwrap();
    assert_eq!(mark(&retry)["replayed"], true);
    assert_eq!(structured(&retry)["sent"], 1);
    assert_eq!(c.count("send_email"), 1);
    retry_client.cancel().await.unwrap();
}
