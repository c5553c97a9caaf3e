//! Path parameters: `{name}` in an endpoint's path takes the input's field `name`,
//! percent-encoded as one path segment, and that field is not sent again in the body or
//! the query; an input that cannot fill a parameter is refused before anything is claimed
//! or sent.

use pg_idempotency_client::*;
use serde_json::{json, Value};

use super::provider::provider;
use super::stores::*;

/// A `/` and a space stay inside their segment; a number is its JSON text; the body and
/// the query keep the other fields; the key is the whole input's, so two ids with the same
/// body are two calls.
pub async fn path_parameters_reach_the_right_path(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store.clone());
    let post = unique_action("note");
    web.register(
        Action::new(
            post.clone(),
            Method::POST,
            format!("{}/customers/{{id}}/notes/{{note}}", p.base),
        )
        .upstream_key(UpstreamKey::CallKey),
    )
    .unwrap();
    let first = json!({"id": "cus 1/2", "note": 7, "text": "hi"});
    let second = json!({"id": "cus 1", "note": 7, "text": "hi"});
    for input in [&first, &second, &first] {
        web.execute(&post, input.clone()).await.unwrap();
    }
    let seen = p.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].path, "/customers/cus%201%2F2/notes/7");
    assert_eq!(seen[1].path, "/customers/cus%201/notes/7");
    for (s, input) in seen.iter().zip([&first, &second]) {
        assert_eq!(
            serde_json::from_str::<Value>(&s.body).unwrap(),
            json!({"text": "hi"})
        );
        assert_eq!(s.key.as_deref(), Some(hash_key(input).as_str()));
    }

    let get = unique_action("customer");
    web.register(
        Action::new(
            get.clone(),
            Method::GET,
            format!("{}/customers/{{id}}", p.base),
        )
        .params(Params::Query),
    )
    .unwrap();
    web.execute(&get, json!({"id": "a?b#c%d", "expand": "notes"}))
        .await
        .unwrap();
    let seen = p.seen();
    assert_eq!(seen[2].path, "/customers/a%3Fb%23c%25d?expand=notes");
    assert_eq!(seen[2].method, "GET");
}

/// A missing, null, object, array or boolean field, an empty one, "." and "..", and an
/// input that is not an object are refused with InvalidArgument, a detail and a hint,
/// before anything is claimed (failures are remembered here, so a claimed call would leave
/// a record) or sent. A template the executor cannot fill is refused by `register`.
pub async fn bad_path_inputs_claim_nothing(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store.clone());
    let name = unique_action("customer");
    web.register(
        Action::new(
            name.clone(),
            Method::PUT,
            format!("{}/customers/{{id}}", p.base),
        )
        .idempotent(Idempotent::new().cache_failures(true)),
    )
    .unwrap();
    for input in [
        json!({"name": "Ann"}),
        json!({"id": null}),
        json!({"id": {"n": 1}}),
        json!({"id": [1]}),
        json!({"id": true}),
        json!({"id": ""}),
        json!({"id": "."}),
        json!({"id": ".."}),
        json!(["id"]),
        json!("42"),
    ] {
        let e = web.execute(&name, input.clone()).await.unwrap_err();
        assert!(
            store
                .lookup(&name, &hash_key(&input))
                .await
                .unwrap()
                .is_none(),
            "{input}: claimed"
        );
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{input}: {e}");
        assert!(e.detail().is_some() && e.hint().is_some(), "{input}: {e:?}");
    }
    assert_eq!(p.seen().len(), 0, "{:?}", p.seen());

    for endpoint in ["/customers/{id", "/customers/{}", "/customers?id={id}"] {
        let name = unique_action("customer");
        let e = web
            .register(Action::new(
                name,
                Method::GET,
                format!("{}{endpoint}", p.base),
            ))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{endpoint}: {e}");
        assert!(
            e.detail().is_some() && e.hint().is_some(),
            "{endpoint}: {e:?}"
        );
    }
}
