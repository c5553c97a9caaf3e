//! A retry in the holder's own proxy after an outage of the store longer than the lease:
//! the retry joins the proxy's live holder, which has the first run's result, instead of
//! taking the call over through the store (whose lease for it lapsed) and sending it a
//! second time.

use std::time::Duration;

use crate::common::cut_store::{CutStore, Reach};
use crate::common::*;
use serde_json::json;

/// Whether the record's lease has lapsed (read directly, not through the forwarder).
async fn lapsed(db: &tokio_postgres::Client, scope: &str, key: &str) -> bool {
    db.query_typed(
        "SELECT lease_until < clock_timestamp() FROM idem_lookup($1, $2)",
        &[
            (&scope, tokio_postgres::types::Type::TEXT),
            (&key, tokio_postgres::types::Type::TEXT),
        ],
    )
    .await
    .unwrap()
    .first()
    .and_then(|r| r.get::<_, Option<bool>>(0))
    .unwrap_or(false)
}

/// The record's state and attempt.
async fn record(db: &tokio_postgres::Client, scope: &str, key: &str) -> Option<(String, i32)> {
    db.query_typed(
        "SELECT state::text, attempt FROM idem_lookup($1, $2)",
        &[
            (&scope, tokio_postgres::types::Type::TEXT),
            (&key, tokio_postgres::types::Type::TEXT),
        ],
    )
    .await
    .unwrap()
    .first()
    .map(|r| (r.get(0), r.get(1)))
}

/// The tool ran (its effect logged) and the store is cut off before the holder records
/// the result, for longer than the lease. Then the store takes `begin`s again but not yet
/// the holder's recording, and the caller retries through the same proxy: it joins the
/// holder (the gate counts its wait) rather than running the tool again. Once the holder
/// records, the retry gets the replay: one effect, attempt 1.
#[tokio::test]
async fn a_retry_joins_its_own_holder_after_an_outage_past_the_lease() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "own-holder");
    let name = pg_idempotency_tests::scope("mail");
    let cut = CutStore::start(&pg_idempotency_tests::dsn()).await;
    let config = c.dir.join("proxy-own-holder.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = {}\npool_size = 4\n\n{}\n[tools.send_email]\nlease = \"1s\"\nwait = \"60s\"\n",
            toml_str(&cut.dsn),
            c.upstream_stdio(&name)
        ),
    )
    .unwrap();
    let mut proxy = HttpProxy::start(&config, &c.env()).await;
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let scope = pg_idempotency_mcp::scope::scope_of(&name, "send_email", "anonymous");
    let key = "own-1";
    let args = json!({"to": "a@x", "subject": "s", "message_id": key, "hold": true});
    let client = proxy.client().await;
    let first = tokio::spawn({
        let (peer, args) = (client.peer().clone(), args.clone());
        async move {
            peer.call_tool(params("send_email", args, key_meta(key)))
                .await
        }
    });
    c.held(key).await;
    // The effect happened; the store goes away before the result can be recorded.
    cut.set(Reach::Down);
    c.release();
    // The first caller is answered once its dispatch stops waiting for the recording (as
    // long as the lease); the holder goes on trying in the background.
    let _ = first.await.unwrap();
    until_lapsed(&db, &scope, key).await;
    // `begin` reaches the store again; the holder's recording does not yet.
    cut.set(Reach::HoldersDown);
    let retry = tokio::spawn({
        let (peer, args) = (client.peer().clone(), args.clone());
        async move {
            peer.call_tool(params("send_email", args, key_meta(key)))
                .await
        }
    });
    // The retry either joined the holder (the gate counts its wait), or took the call
    // over and sent it again, or was answered.
    let mut joined = proxy.waiting.clone();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while *joined.borrow_and_update() == 0 && c.count("send_email") < 2 && !retry.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the retry neither joined, ran nor answered"
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), joined.changed()).await;
    }
    cut.set(Reach::Up);
    let retry = retry.await.unwrap().expect("the retry is answered");
    assert_eq!(
        c.count("send_email"),
        1,
        "the retry ran the tool again beside its own holder: {:#?}",
        c.effects()
    );
    assert_eq!(mark(&retry)["replayed"], true, "{retry:?}");
    assert_eq!(structured(&retry)["sent"], 1, "{retry:?}");
    // The holder recorded the first run's result under its own claim.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let r = record(&db, &scope, key).await;
        if r.as_ref().is_some_and(|(s, _)| s != "in_progress") {
            assert_eq!(r, Some(("succeeded".to_string(), 1)));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never recorded: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client.cancel().await.unwrap();
    proxy.kill().await;
}

/// Until the record's lease has lapsed (the holder cannot extend it while the store is
/// cut off).
async fn until_lapsed(db: &tokio_postgres::Client, scope: &str, key: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !lapsed(db, scope, key).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
