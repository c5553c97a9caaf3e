//! An authenticated API: the caller's own HTTP client (its default headers), an action's
//! static headers, a call's headers (a bearer token) over them; a wrong or missing token
//! gets the provider's 401; headers are never stored, nor part of the key or fingerprint
//! unless the action names them; headers HTTP cannot carry, and `Idempotency-Key`, are
//! refused before anything is claimed or sent.

use std::time::Duration;

use pg_idempotency_client::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Value};

use super::provider::{provider, Provider};
use super::stores::*;
use super::told::Told;

/// A client of the caller's own: a user agent and default headers of its own.
fn callers_client() -> reqwest::Client {
    let mut defaults = HeaderMap::new();
    defaults.insert("x-client", HeaderValue::from_static("billing"));
    defaults.insert("x-tenant", HeaderValue::from_static("from-client"));
    reqwest::Client::builder()
        .user_agent("acme-billing/1.0")
        .default_headers(defaults)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn record_of(p: &Provider, path: &str) -> super::provider::Seen {
    let seen = p.seen_at(path);
    assert_eq!(seen.len(), 1, "{path}: {seen:?}");
    seen[0].clone()
}

/// The caller's client's defaults arrive; an action's header replaces the client's of the
/// same name, a call's replaces the action's; the bearer token of the call gets through the
/// provider's check; the executor's key is the one `Idempotency-Key`. The client given
/// after the action was registered is the one it uses.
pub async fn the_callers_client_and_headers_arrive(store: Store) {
    let p = provider().await;
    for client_first in [true, false] {
        let name = unique_action("charge");
        let path = format!("/auth/tok-1/charges/{client_first}");
        let action = Action::new(name.clone(), Method::POST, format!("{}{path}", p.base))
            .header("X-Tenant", "from-action")
            .header("X-Api-Version", "2")
            .header("X-Static", "s")
            // The bare call key, to compare with the input's hash (the default, the
            // record's uuid, is web/keys.rs's).
            .upstream_key(UpstreamKey::CallKey);
        let web = if client_first {
            let web = WebExecutor::new(store.clone()).with_http_client(callers_client());
            web.register(action).unwrap();
            web
        } else {
            let web = WebExecutor::new(store.clone());
            web.register(action).unwrap();
            web.with_http_client(callers_client())
        };
        let input = json!({"amount": 100});
        let call = Headers::new().bearer("tok-1").header("x-api-version", "3");
        let done = web.execute_call(&name, input.clone(), call).await;
        assert!(matches!(done, Ok(Dispatched::Ran(_))), "{done:?}");
        let seen = record_of(&p, &path);
        let case = format!("client given first: {client_first}");
        assert_eq!(seen.header("user-agent"), ["acme-billing/1.0"], "{case}");
        assert_eq!(seen.header("x-client"), ["billing"], "{case}");
        assert_eq!(seen.header("x-tenant"), ["from-action"], "{case}");
        assert_eq!(seen.header("x-static"), ["s"], "{case}");
        assert_eq!(seen.header("x-api-version"), ["3"], "{case}");
        assert_eq!(seen.header("authorization"), ["Bearer tok-1"], "{case}");
        assert_eq!(
            seen.header("idempotency-key"),
            [hash_key(&input).as_str()],
            "{case}"
        );
    }
}

/// Without the token, or with a wrong one, the provider answers 401: an `Http` error not
/// worth retrying. By default the failure is not remembered, so the call with the right
/// token then runs (under the same key); with `cache_failures` it is remembered like any
/// 4xx, and the right token gets the 401 back without reaching the provider (the token is
/// not part of the key).
pub async fn a_wrong_or_missing_token_gets_the_401(store: Store) {
    let p = provider().await;
    for cache in [false, true] {
        let web = WebExecutor::new(store.clone());
        let name = unique_action("charge");
        let path = format!("/auth/right/charges/{cache}");
        web.register(
            Action::new(name.clone(), Method::POST, format!("{}{path}", p.base))
                .idempotent(Idempotent::new().cache_failures(cache))
                .upstream_key(UpstreamKey::CallKey),
        )
        .unwrap();
        let input = json!({"amount": 5});
        let key = hash_key(&input);
        let e = web.execute(&name, input.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Http, "{e}");
        assert_eq!(e.response().unwrap()["status"], 401, "{e}");
        assert!(!e.retryable(), "{e}");
        let remembered = store.lookup(&name, &key).await.unwrap();
        assert_eq!(remembered.is_some(), cache, "cache_failures {cache}");
        let wrong = web
            .execute_call(&name, input.clone(), Headers::new().bearer("wrong"))
            .await
            .unwrap_err();
        assert_eq!(wrong.response().unwrap()["status"], 401, "{wrong}");
        assert_eq!(wrong.replayed(), cache, "{wrong}");
        let right = web
            .execute_call(&name, input.clone(), Headers::new().bearer("right"))
            .await;
        let seen = p.seen_at(&path);
        if cache {
            let e = right.unwrap_err();
            assert!(e.replayed(), "{e}");
            assert_eq!(e.response().unwrap()["status"], 401, "{e}");
            assert_eq!(seen.len(), 1, "{seen:?}");
        } else {
            assert!(matches!(right, Ok(Dispatched::Ran(_))), "{right:?}");
            assert_eq!(seen.len(), 3, "{seen:?}");
            assert_eq!(seen[0].header("authorization"), Vec::<&str>::new());
            assert_eq!(seen[1].header("authorization"), ["Bearer wrong"]);
            assert_eq!(seen[2].header("authorization"), ["Bearer right"]);
        }
        for s in &seen {
            assert_eq!(s.key.as_deref(), Some(key.as_str()));
        }
    }
}

/// The record holds neither an action's header nor a call's: it is found under the key of
/// the input alone, its fingerprint is the input's, and its text holds no header value; a
/// repeat with another token is the same call, replayed.
pub async fn headers_are_never_stored(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store.clone());
    let name = unique_action("charge");
    let path = "/auth/call-secret-1/charges";
    web.register(
        Action::new(name.clone(), Method::POST, format!("{}{path}", p.base))
            .header("x-static-secret", "static-secret-1"),
    )
    .unwrap();
    let input = json!({"amount": 9});
    let Dispatched::Ran(answer) = web
        .execute_call(&name, input.clone(), Headers::new().bearer("call-secret-1"))
        .await
        .unwrap()
    else {
        panic!("the first call did not run")
    };
    let record = store
        .lookup(&name, &hash_key(&input))
        .await
        .unwrap()
        .expect("the record, under the input's key");
    assert_eq!(
        record.fingerprint,
        Some(pg_idempotency_canon::hash_value(&input).unwrap()),
        "the fingerprint is the input's alone"
    );
    let text = format!("{record:?}");
    for secret in ["call-secret-1", "static-secret-1"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert_eq!(
        web.execute_call(&name, input.clone(), Headers::new().bearer("other"))
            .await
            .unwrap(),
        Dispatched::Replayed(answer)
    );
    assert_eq!(p.seen_at(path).len(), 1);
}

/// No header value reaches the store, not even one that joins the fingerprint (its hash
/// does): every key, request and response the store is told is free of them.
pub async fn no_header_value_reaches_the_store(store: Store) {
    let p = provider().await;
    let told = Told::over(store);
    let web = WebExecutor::new(told.clone());
    let name = unique_action("charge");
    web.register(
        Action::new(
            name.clone(),
            Method::POST,
            format!("{}/auth/call-secret-3/{{id}}", p.base),
        )
        .header("x-static-secret", "static-secret-3")
        .fingerprint_headers(["x-account", "authorization", "x-static-secret"]),
    )
    .unwrap();
    let call = || {
        Headers::new()
            .bearer("call-secret-3")
            .header("x-account", "account-secret-3")
    };
    let input = json!({"id": "c1", "amount": 2});
    let Dispatched::Ran(answer) = web
        .execute_call(&name, input.clone(), call())
        .await
        .unwrap()
    else {
        panic!("the first call did not run")
    };
    assert_eq!(
        web.execute_call(&name, input.clone(), call())
            .await
            .unwrap(),
        Dispatched::Replayed(answer)
    );
    let heard = told.heard();
    assert!(heard.contains("begin"), "{heard}");
    for secret in ["call-secret-3", "static-secret-3", "account-secret-3"] {
        assert!(
            !heard.contains(secret),
            "the store was told {secret}: {heard}"
        );
    }
    let seen = p.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].header("x-account"), ["account-secret-3"]);
}

/// `fingerprint_headers`: the named headers' values (the call's over the action's; a
/// missing one is null) join what the action's rule compares, so a repeat under the same
/// key from another account is a mismatch, not the other account's answer. Without it, the
/// other account gets the replay.
pub async fn fingerprint_headers_join_the_fingerprint(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store.clone());
    let account = |a: &str| Headers::new().header("X-Account", a);
    let input = json!({"amount": 3});
    let register = |action: Action| web.register(action).unwrap();
    let endpoint = format!("{}/accounts/charges", p.base);

    let named = unique_action("charge");
    register(
        Action::new(named.clone(), Method::POST, &endpoint).fingerprint_headers(["x-account"]),
    );
    let Dispatched::Ran(first) = web
        .execute_call(&named, input.clone(), account("a1"))
        .await
        .unwrap()
    else {
        panic!("the first call did not run")
    };
    assert_eq!(
        web.execute_call(&named, input.clone(), account("a1"))
            .await
            .unwrap(),
        Dispatched::Replayed(first.clone())
    );
    for other in [Some("a2"), None] {
        let call = other.map(account).unwrap_or_default();
        let e = web
            .execute_call(&named, input.clone(), call)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch, "{other:?}: {e}");
    }
    let record = store
        .lookup(&named, &hash_key(&input))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        record.fingerprint,
        Some(pg_idempotency_canon::hash_value(&input).unwrap())
    );

    // Without the option, another account replays the first one's answer.
    let unnamed = unique_action("charge");
    register(Action::new(unnamed.clone(), Method::POST, &endpoint));
    let Dispatched::Ran(theirs) = web
        .execute_call(&unnamed, input.clone(), account("a1"))
        .await
        .unwrap()
    else {
        panic!("the first call did not run")
    };
    assert_eq!(
        web.execute_call(&unnamed, input.clone(), account("a2"))
            .await
            .unwrap(),
        Dispatched::Replayed(theirs)
    );

    // A missing header is null: two calls without it are the same call. The action's own
    // header counts as sent, under the call's.
    let own = unique_action("charge");
    register(
        Action::new(own.clone(), Method::POST, &endpoint)
            .header("x-region", "eu")
            .fingerprint_headers(["X-Account", "X-Region"]),
    );
    let Dispatched::Ran(r) = web.execute(&own, input.clone()).await.unwrap() else {
        panic!("the first call did not run")
    };
    assert_eq!(
        web.execute(&own, input.clone()).await.unwrap(),
        Dispatched::Replayed(r.clone())
    );
    let same_region = Headers::new().header("x-region", "eu");
    assert_eq!(
        web.execute_call(&own, input.clone(), same_region)
            .await
            .unwrap(),
        Dispatched::Replayed(r)
    );
    for call in [account("a1"), Headers::new().header("x-region", "us")] {
        let e = web
            .execute_call(&own, input.clone(), call)
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch, "{e}");
    }

    // Over an Explicit key, whose rule compares nothing: another body replays, another
    // account is a mismatch.
    let explicit = unique_action("ship");
    register(
        Action::new(explicit.clone(), Method::POST, &endpoint)
            .idempotent(Idempotent::new().key_supplier(|v| v["order"].as_str().map(str::to_string)))
            .fingerprint_headers(["x-account"]),
    );
    let order = |body: &str| json!({"order": "o-1", "body": body});
    let Dispatched::Ran(shipped) = web
        .execute_call(&explicit, order("a"), account("a1"))
        .await
        .unwrap()
    else {
        panic!("the first call did not run")
    };
    assert_eq!(
        web.execute_call(&explicit, order("b"), account("a1"))
            .await
            .unwrap(),
        Dispatched::Replayed(shipped)
    );
    let e = web
        .execute_call(&explicit, order("a"), account("a2"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch, "{e}");

    // The same in a service whose settings name the Explicit key, with a call that brings
    // settings of its own beside its headers (a `Call`): the service's rule is layered
    // under the headers.
    let in_service = unique_action("ship");
    web.register_toolkit(
        Toolkit::service("shipping")
            .key_supplier(|v| v["order"].as_str().map(str::to_string))
            .idempotent(Idempotent::new().explicit())
            .action(
                Action::new(in_service.clone(), Method::POST, &endpoint)
                    .fingerprint_headers(["x-account"]),
            ),
    )
    .unwrap();
    let with = |a: &str| {
        Call::new()
            .idempotent(Idempotent::new().ttl(Duration::from_secs(60)))
            .extension(account(a))
    };
    let Dispatched::Ran(shipped) = web
        .execute_call(&in_service, order("a"), with("a1"))
        .await
        .unwrap()
    else {
        panic!("the first call did not run")
    };
    assert_eq!(
        web.execute_call(&in_service, order("b"), with("a1"))
            .await
            .unwrap(),
        Dispatched::Replayed(shipped)
    );
    let e = web
        .execute_call(&in_service, order("a"), with("a2"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch, "{e}");
    assert_eq!(p.seen().len(), 5, "{:?}", p.seen());
}

/// A header name or value HTTP cannot carry, and `Idempotency-Key`, are refused: an
/// action's by `register` (which registers nothing), a call's by `execute_call` before
/// anything is claimed or sent. Every refusal is InvalidArgument with a detail and a hint,
/// and never quotes a value back.
pub async fn bad_headers_are_refused(store: Store) {
    let p = provider().await;
    let web = WebExecutor::new(store.clone());
    let endpoint = format!("{}/charges", p.base);
    let refused_actions: Vec<(&str, Action)> = vec![
        (
            "a bad name",
            Action::new("", Method::POST, &endpoint).header("x bad", "v"),
        ),
        (
            "a line break",
            Action::new("", Method::POST, &endpoint).header("x-token", "secret-9\r\nx-evil: 1"),
        ),
        (
            "Idempotency-Key",
            Action::new("", Method::POST, &endpoint).header("Idempotency-Key", "k-1"),
        ),
        (
            "a bad fingerprint name",
            Action::new("", Method::POST, &endpoint).fingerprint_headers(["x:y"]),
        ),
    ];
    for (case, mut action) in refused_actions {
        let name = unique_action("charge");
        action.name = name.clone();
        let e = web.register(action).unwrap_err();
        assert_invalid(&e, case);
        let unknown = web.execute(&name, json!({})).await.unwrap_err();
        assert_eq!(
            unknown.kind,
            ErrorKind::UnknownTool,
            "{case}: registered anyway"
        );
    }

    let name = unique_action("charge");
    // Remembered failures: a call that was claimed and then failed would leave a record.
    web.register(
        Action::new(name.clone(), Method::POST, &endpoint)
            .idempotent(Idempotent::new().cache_failures(true)),
    )
    .unwrap();
    let mut own_map = HeaderMap::new();
    own_map.insert("idempotency-key", HeaderValue::from_static("k-2"));
    let refused_calls: Vec<(&str, Headers)> = vec![
        (
            "Idempotency-Key",
            Headers::new().bearer("t").header("idempotency-key", "k-1"),
        ),
        (
            "a line break",
            Headers::new().header("x-token", "secret-9\nx-evil: 1"),
        ),
        ("a bad name", Headers::new().header("x(bad)", "v")),
        ("Idempotency-Key in a map", Headers::from(own_map)),
    ];
    let input = json!({"amount": 1});
    for (case, headers) in refused_calls {
        let e = web
            .execute_call(&name, input.clone(), headers)
            .await
            .unwrap_err();
        assert_invalid(&e, case);
    }
    assert!(
        store
            .lookup(&name, &hash_key(&input))
            .await
            .unwrap()
            .is_none(),
        "a refused call was claimed"
    );
    assert_eq!(
        p.seen().len(),
        0,
        "a refused call reached the provider: {:?}",
        p.seen()
    );
}

fn assert_invalid(e: &Error, case: &str) {
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{case}: {e}");
    assert!(e.detail().is_some() && e.hint().is_some(), "{case}: {e:?}");
    let said: Value = json!([e.message, e.detail(), e.hint()]);
    assert!(
        !said.to_string().contains("secret-9"),
        "{case}: a value quoted back: {said}"
    );
}
