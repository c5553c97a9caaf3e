//! The product's promise, end to end: a `send_email` tool retried three times sends one
//! email. The side effect is real: a row in an outbox table, counted afterwards.

use pg_idempotency_tests::*;

/// What a service does around its side effect, with plain SQL.
fn send_email(c: &mut Client, scope: &str, to: &str) -> String {
    let request = format!(r#"{{"to": "{to}", "subject": "Welcome"}}"#);
    let b = try_begin(c, scope, "welcome-ann", Some(&request), None, None).unwrap();
    match b.outcome.as_str() {
        "claimed" => {
            let id: i32 = c
                .query_one(
                    &format!(
                        "INSERT INTO outbox_{} (recipient) VALUES ($1) RETURNING id",
                        table(scope)
                    ),
                    &[&to],
                )
                .unwrap()
                .get(0);
            complete(
                c,
                scope,
                "welcome-ann",
                b.fence.unwrap(),
                &format!(r#"{{"outbox_id": {id}}}"#),
            )
            .unwrap();
            format!("sent {id}")
        }
        "replay" => format!("replayed {}", b.response.unwrap_or_default()),
        other => other.to_string(),
    }
}

fn table(scope: &str) -> String {
    scope.replace('-', "_")
}

#[test]
fn three_retries_send_one_email() {
    let scope = scope("send-email");
    let mut c = connect();
    c.batch_execute(&format!(
        "CREATE TABLE outbox_{} (id serial PRIMARY KEY, recipient text)",
        table(&scope)
    ))
    .unwrap();
    let answers: Vec<String> = (0..3)
        .map(|_| send_email(&mut c, &scope, "ann@example.com"))
        .collect();
    let sent: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM outbox_{}", table(&scope)),
            &[],
        )
        .unwrap()
        .get(0);
    c.batch_execute(&format!("DROP TABLE outbox_{}", table(&scope)))
        .unwrap();
    assert_eq!(sent, 1);
    assert_eq!(answers[0], "sent 1");
    assert_eq!(answers[1], r#"replayed {"outbox_id": 1}"#);
    assert_eq!(answers[2], answers[1]);
}
