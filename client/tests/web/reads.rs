//! Reads and the methods no one declared: GET, HEAD, OPTIONS and TRACE are reads, never
//! deduplicated by settings they do not carry themselves (the service's, the executor's
//! defaults), so a read without settings of its own reaches the provider every time; a
//! method that is neither a read nor POST, PUT, PATCH or DELETE is refused at registration
//! until the action says how to treat it (`Action::side_effect`).

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::json;

use super::provider::provider;
use super::stores::*;

const HOUR: Duration = Duration::from_secs(3600);

/// A read without settings of its own, called twice with the same input, runs twice
/// against the provider: alone, under the executor's defaults, and in a service with
/// settings. Neither request carries a key, and nothing is remembered.
pub async fn a_read_without_settings_runs_every_time(store: Store) {
    let p = provider().await;
    for method in safe_methods() {
        for level in ["none", "defaults", "service"] {
            let case = format!("{method} under {level}");
            let web = match level {
                "defaults" => WebExecutor::new(store.clone())
                    .with_defaults(Idempotent::new().hash_input().ttl(HOUR)),
                _ => WebExecutor::new(store.clone()),
            };
            let name = unique_action("get_user");
            let path = format!("/users/{method}/{level}");
            let action = Action::new(name.clone(), method.clone(), format!("{}{path}", p.base))
                .params(Params::Query);
            if level == "service" {
                web.register_toolkit(
                    Toolkit::service("users")
                        .idempotent(Idempotent::new().hash_input().ttl(HOUR))
                        .action(action),
                )
            } else {
                web.register(action)
            }
            .unwrap();
            let input = json!({"id": "42"});
            for _ in 0..2 {
                let answer = web.execute(&name, input.clone()).await.unwrap();
                assert!(matches!(answer, Dispatched::Ran(_)), "{case}: {answer:?}");
            }
            let seen = p.seen_at(&path);
            assert_eq!(
                seen.len(),
                2,
                "{case}: a repeat was answered from the store"
            );
            assert!(seen.iter().all(|s| s.key.is_none()), "{case}: {seen:?}");
            assert!(
                store
                    .lookup(&name, &hash_key(&input))
                    .await
                    .unwrap()
                    .is_none(),
                "{case}: a read was remembered"
            );
        }
    }
}

/// CONNECT and an extension method are neither reads nor writes the executor knows:
/// refused at registration (InvalidArgument, with a detail and a hint), nothing sent. An
/// action that says how to treat its method is registered: `side_effect(true)` as POST
/// (the key goes upstream, a repeat is answered from the store), `side_effect(false)` as
/// GET (no key, every call runs).
pub async fn an_undeclared_method_is_refused_until_the_action_says(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store.clone());
    let purge = Method::from_bytes(b"PURGE").unwrap();
    for method in [Method::CONNECT, purge.clone()] {
        let name = unique_action("purge_cache");
        let e = web
            .register(Action::new(
                name.clone(),
                method.clone(),
                format!("{}/cache", p.base),
            ))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{method}: {e:?}");
        assert!(e.message.contains(method.as_str()), "{method}: {e}");
        assert!(
            e.detail().is_some() && e.hint().is_some(),
            "{method}: {e:?}"
        );
        let unknown = web.execute(&name, json!({})).await.unwrap_err();
        assert_eq!(
            unknown.kind,
            ErrorKind::UnknownTool,
            "{method}: registered anyway"
        );
    }
    assert!(p.seen().is_empty(), "a refused action reached the provider");

    let write = unique_action("purge_cache");
    web.register(
        Action::new(
            write.clone(),
            purge.clone(),
            format!("{}/cache/write", p.base),
        )
        .side_effect(true),
    )
    .unwrap();
    let input = json!({"path": "/index.html"});
    let first = web.execute(&write, input.clone()).await.unwrap();
    let Dispatched::Ran(answer) = first else {
        panic!("the first call did not run: {first:?}")
    };
    assert_eq!(
        web.execute(&write, input.clone()).await.unwrap(),
        Dispatched::Replayed(answer)
    );
    let seen = p.seen_at("/cache/write");
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "PURGE");
    let record = store
        .lookup(&write, &hash_key(&input))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        seen[0].key.as_deref(),
        Some(record.upstream_key.to_string().as_str())
    );

    let read = unique_action("probe_cache");
    web.register(
        Action::new(read.clone(), purge, format!("{}/cache/read", p.base))
            .params(Params::Query)
            .side_effect(false),
    )
    .unwrap();
    for _ in 0..2 {
        assert!(matches!(
            web.execute(&read, json!({"path": "/"})).await.unwrap(),
            Dispatched::Ran(_)
        ));
    }
    let seen = p.seen_at("/cache/read");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|s| s.key.is_none()), "{seen:?}");
}
