//! The Java framework's `IdempotencyExample` (client/examples/idempotency_example/), its pieces
//! run here against the real database and a real local HTTP mail provider, each behaviour
//! it shows asserted: create_issue keyed by the lower-cased title, place_order's failure
//! remembered and its repeat refused at once, send_email sent once over POST with one
//! `Idempotency-Key`, records kept a day after completion (read through `idem_lookup`),
//! and one `PgStore` for tools and web actions.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use crate::idempotency_example::{self as example, Backend};
use crate::mail_service::MailService;
use pg_idempotency_client::*;
use serde_json::json;

/// `expires_at - completed_at` and the upstream key of the caller's record, through the
/// SQL API's `idem_lookup`.
async fn kept_after_completion(scope: &str, key: &str) -> (Duration, uuid::Uuid) {
    let row = pool()
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT extract(epoch FROM expires_at - completed_at)::float8, upstream_key
               FROM idem_lookup($1, $2)",
            &[&scope, &key],
        )
        .await
        .unwrap_or_else(|e| panic!("no record of {scope}/{key}: {e}"));
    (Duration::from_secs_f64(row.get(0)), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_frameworks_example_does_what_it_shows() {
    let store = example::postgres(pool()).await.unwrap();
    let mail = MailService::start().await.unwrap();
    let backend = Arc::new(Backend::default());
    let (tools, web) = example::with_store(store.clone(), backend.clone(), &mail.endpoint).unwrap();
    // One store for both paths.
    assert!(Arc::ptr_eq(tools.store(), &store) && Arc::ptr_eq(web.store(), &store));
    let day = Duration::from_secs(86_400);
    let run = unique("run");

    // create_issue: titles that differ in case are one issue.
    let title = format!("Crash on start {run}");
    let first = tools
        .dispatch("create_issue", json!({"title": title, "body": "a"}))
        .await
        .unwrap();
    let Dispatched::Ran(created) = first else {
        panic!("the first create_issue did not run: {first:?}")
    };
    let again = tools
        .dispatch(
            "create_issue",
            json!({"title": title.to_uppercase(), "body": "b"}),
        )
        .await
        .unwrap();
    assert_eq!(again, Dispatched::Replayed(created));
    assert_eq!(backend.issues.lock().unwrap().len(), 1, "two issues opened");
    let (kept, _) = kept_after_completion("create_issue", &title.to_lowercase()).await;
    assert_eq!(
        kept, day,
        "create_issue's record is not kept a day after completion"
    );

    // place_order: a rejected order is remembered, and its repeat refused without running.
    let order = json!({"sku": format!("sku-{run}"), "quantity": 0});
    let rejected = tools
        .dispatch("place_order", order.clone())
        .await
        .unwrap_err();
    assert_eq!(rejected.kind, ErrorKind::ToolFailed, "{rejected:?}");
    assert!(!rejected.replayed());
    let refused = tools
        .dispatch("place_order", order.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::RepeatRefused, "{refused:?}");
    assert_eq!(backend.orders.lock().unwrap().len(), 1, "the repeat ran");
    let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&order).unwrap());
    let record = store.lookup("place_order", &key).await.unwrap().unwrap();
    assert_eq!(record.state, State::Failed);

    // send_email: sent once, over POST, with the record's key; the repeat is a replay.
    let message_id = format!("msg-{run}");
    let email =
        json!({"messageId": message_id, "to": "ann@example.com", "subject": "Hi", "body": "Hello"});
    let sent = web.execute("send_email", email.clone()).await.unwrap();
    let Dispatched::Ran(answer) = sent else {
        panic!("the first send_email did not run: {sent:?}")
    };
    assert_eq!(
        web.execute("send_email", email).await.unwrap(),
        Dispatched::Replayed(answer)
    );
    let received = mail.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].method, "POST");
    assert_eq!(received[0].body["messageId"], message_id.as_str());
    let (kept, upstream_key) = kept_after_completion("send_email", &message_id).await;
    assert_eq!(
        received[0].idempotency_key.as_deref(),
        Some(upstream_key.to_string().as_str())
    );
    assert_eq!(
        kept, day,
        "send_email's record is not kept a day after completion"
    );
}
