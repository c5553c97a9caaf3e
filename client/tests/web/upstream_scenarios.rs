//! The web executor against a provider we did not write: tests/upstream-node/server.js,
//! express with express-idempotency (it deduplicates on `Idempotency-Key` itself: a 2xx
//! answer is remembered and replayed, a request while the key still runs gets 409). Its
//! handler counts real executions, so "exactly one charge" is the provider's word, not ours.
//! Over every store, one test per (scenario, store).
//!
//! Needs node and tests/upstream-node/node_modules (scripts/upstream-node.sh installs them);
//! without either, each test is recorded as skipped with that reason.

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::{json, Value};

use crate::web::stores::*;
use crate::web::upstream::Upstream;

/// A call repeated: by this executor (its store replays), and by a process that lost
/// its record (a restarted service on a fresh `MemoryStore`): the same key reaches the
/// provider, which replays its first answer. One execution.
pub async fn retries_execute_once(store: Store) {
    let Some(u) = Upstream::start() else { return };
    let name = unique_action("charge");
    // The bare call key: the one choice a process that lost its records still sends alike.
    let action = Action::new(name.clone(), Method::POST, format!("{}/charges", u.base))
        .upstream_key(UpstreamKey::CallKey);
    let input = json!({"amount": 1200, "card": "c1"});
    let web = WebExecutor::new(store);
    web.register(action.clone()).unwrap();
    let Dispatched::Ran(first) = web.execute(&name, input.clone()).await.unwrap() else {
        panic!("the first call did not run")
    };
    assert_eq!(first["execution"], 1);
    assert_eq!(first["key"], hash_key(&input));
    for _ in 0..2 {
        assert_eq!(
            web.execute(&name, input.clone()).await.unwrap(),
            Dispatched::Replayed(first.clone())
        );
    }
    for _ in 0..2 {
        let restarted = WebExecutor::new(std::sync::Arc::new(MemoryStore::new()));
        restarted.register(action.clone()).unwrap();
        assert_eq!(
            restarted.execute(&name, input.clone()).await.unwrap(),
            Dispatched::Ran(first.clone()),
            "the provider's replay"
        );
    }
    let counts = u.counts().await;
    assert_eq!(counts["executions"], 1, "{counts}");
    assert_eq!(counts["replays"], 2, "{counts}");
}

/// The first attempt hangs (the handler holds the request) past the action's timeout;
/// the provider then finishes it and remembers its answer; the claim's lease lapses and
/// a retry takes the call over with the same key (the call's, or the record's uuid):
/// the provider replays, the executor returns that answer. One execution.
pub async fn a_takeover_after_the_provider_finished(store: Store) {
    for which in [UpstreamKey::CallKey, UpstreamKey::Record] {
        let Some(u) = Upstream::start() else { return };
        let (web, name) = hanging_charge(&u, &store, which, Idempotent::new());
        let input = json!({"amount": 500, "hold": true});
        let key = hash_key(&input);
        let claim = first_attempt_held(&u, &web, &store, &name, &input).await;
        u.release().await;
        u.until("the first request executed and was remembered", |c| {
            c["executions"] == 1 && c["remembered"] == 1
        })
        .await;
        let answer = take_over(&web, &name, &input).await.unwrap();
        let expected = match which {
            UpstreamKey::CallKey => key.clone(),
            UpstreamKey::Record => claim.upstream_key.to_string(),
        };
        assert_eq!(answer["key"], expected.as_str(), "{which:?}: {answer}");
        assert_eq!(answer["execution"], 1, "{which:?}: {answer}");
        let counts = u.counts().await;
        assert_eq!(counts["executions"], 1, "{which:?}: {counts}");
        assert_eq!(counts["replays"], 1, "{which:?}: {counts}");
        let record = store.lookup(&name, &key).await.unwrap().unwrap();
        assert_eq!(record.attempt, 2, "{which:?}: not a takeover");
        assert_eq!(record.response, Some(answer), "{which:?}");
    }
}

/// As above, but the takeover reaches the provider while it still runs the first
/// request: the provider answers 409, which is retried under the same key until the
/// provider is done and replays. Under `UpstreamKey::Record` (the default) the 409 must
/// not lose the uuid: by default its claim is left to lapse (the effect is under way) and
/// taken over with the same uuid; with failures remembered and re-run, the failed record
/// keeps it.
pub async fn a_takeover_while_the_provider_still_runs(store: Store) {
    let rerun_failures = Idempotent::new()
        .cache_failures(true)
        .on_cache_hit(OnCacheHit::ReturnCachedIfSuccess);
    for (which, idem) in [
        (UpstreamKey::CallKey, Idempotent::new()),
        (UpstreamKey::Record, rerun_failures),
        (UpstreamKey::Record, Idempotent::new()),
    ] {
        let Some(u) = Upstream::start() else { return };
        let (web, name) = hanging_charge(&u, &store, which, idem);
        let web = std::sync::Arc::new(web);
        let input = json!({"amount": 700, "hold": true});
        let key = hash_key(&input);
        let claim = first_attempt_held(&u, &web, &store, &name, &input).await;
        let retrying = {
            let (web, name, input) = (web.clone(), name.clone(), input.clone());
            tokio::spawn(async move { take_over(&web, &name, &input).await })
        };
        u.until("a takeover met the running request", |c| {
            c["conflicts"].as_u64() >= Some(1)
        })
        .await;
        u.release().await;
        let answer = tokio::time::timeout(crate::web::upstream::BOUND, retrying)
            .await
            .expect("the retries never ended")
            .unwrap()
            .unwrap();
        let expected = match which {
            UpstreamKey::CallKey => key.clone(),
            UpstreamKey::Record => claim.upstream_key.to_string(),
        };
        assert_eq!(answer["key"], expected.as_str(), "{which:?}: {answer}");
        assert_eq!(answer["execution"], 1, "{which:?}: {answer}");
        let counts = u.counts().await;
        assert_eq!(counts["executions"], 1, "{which:?}: {counts}");
        assert_eq!(counts["started"], 1, "{which:?}: {counts}");
    }
}

/// A charge whose attempt gives up after a second and whose claim lapses a second and a
/// half after its last heartbeat. (The first attempt's timeout must outlast its claim
/// and request on a loaded machine, since the test waits for the provider to hold it.)
fn hanging_charge(
    u: &Upstream,
    store: &Store,
    which: UpstreamKey,
    idem: Idempotent,
) -> (WebExecutor, String) {
    let web = WebExecutor::new(store.clone());
    let name = unique_action("charge");
    web.register(
        Action::new(name.clone(), Method::POST, format!("{}/charges", u.base))
            .idempotent(
                idem.timeout(Duration::from_secs(1))
                    .lease(Duration::from_millis(1500)),
            )
            .upstream_key(which),
    )
    .unwrap();
    (web, name)
}

/// Retries the call until it is done: in progress until the lease lapses, then taken
/// over (and retried again while the provider answers 409).
/// The first attempt, which the provider holds until the action's timeout gives up on
/// it; the claim it leaves.
async fn first_attempt_held(
    u: &Upstream,
    web: &WebExecutor,
    store: &Store,
    name: &str,
    input: &Value,
) -> Record {
    assert_eq!(
        web.execute(name, input.clone()).await.unwrap_err().kind,
        ErrorKind::Timeout
    );
    u.until("the first request is held", |c| c["held"] == 1)
        .await;
    store
        .lookup(name, &hash_key(input))
        .await
        .unwrap()
        .expect("the claim")
}

async fn take_over(web: &WebExecutor, name: &str, input: &Value) -> Result<Value> {
    let retry = Retry {
        attempts: 100,
        base: Duration::from_millis(20),
        max: Duration::from_millis(200),
        ..Retry::default()
    };
    // The takeover's own attempts get a generous timeout: the one that runs must not be
    // cut while it records its answer (that answers Unrecorded, not a retry).
    let patient = Idempotent::new().timeout(crate::web::upstream::BOUND);
    let done = retry
        .run(|| async {
            Ok(web
                .execute_with(name, input.clone(), &patient)
                .await?
                .attempt())
        })
        .await?;
    match done {
        Dispatched::Ran(v) => Ok(v),
        other => panic!("the takeover did not run the call: {other:?}"),
    }
}

/// Two actions to one provider whose calls share an explicit key (an order's creation and
/// its cancellation, both keyed by the order id): by default each sends the record's
/// upstream key, unique per (owner, scope, key), so the provider (which refuses a key
/// reused with another request, 417, as Stripe does) executes both. The bare call key
/// (`UpstreamKey::CallKey`) is the hazard its docs name: the second is refused.
pub async fn two_actions_sharing_a_key_send_the_provider_two(store: Store) {
    for which in [None, Some(UpstreamKey::CallKey)] {
        let Some(u) = Upstream::start() else { return };
        let web = WebExecutor::new(store.clone());
        let (create, cancel) = (unique_action("create_order"), unique_action("cancel_order"));
        let by_order =
            || Idempotent::new().key_supplier(|v| v["order"].as_str().map(str::to_string));
        let mut actions = [
            Action::new(create.clone(), Method::POST, format!("{}/orders", u.base)),
            Action::new(
                cancel.clone(),
                Method::POST,
                format!("{}/orders/{{order}}/cancel", u.base),
            ),
        ];
        for a in &mut actions {
            *a = a.clone().idempotent(by_order());
            if let Some(w) = which {
                *a = a.clone().upstream_key(w);
            }
        }
        for a in actions {
            web.register(a).unwrap();
        }
        let order = json!({"order": "o-17"});
        let created = web.execute(&create, order.clone()).await.unwrap();
        let Dispatched::Ran(created) = created else {
            panic!("{which:?}: the creation did not run: {created:?}")
        };
        let cancelled = web.execute(&cancel, order.clone()).await;
        let counts = u.counts().await;
        match which {
            None => {
                let Ok(Dispatched::Ran(cancelled)) = cancelled else {
                    panic!("the cancellation did not run: {cancelled:?}")
                };
                assert_eq!(cancelled["what"], "cancelled", "{cancelled}");
                assert_eq!(counts["executions"], 2, "{counts}");
                assert_eq!(counts["misused"], 0, "{counts}");
                // What each sent is its own record's uuid: stable for that call, unique to it.
                for (name, answer) in [(&create, &created), (&cancel, &cancelled)] {
                    let record = store.lookup(name, "o-17").await.unwrap().unwrap();
                    assert_eq!(answer["key"], record.upstream_key.to_string(), "{name}");
                }
                assert_ne!(created["key"], cancelled["key"]);
                // A repeat of each is its own replay, not the other's answer.
                assert_eq!(
                    web.execute(&cancel, order.clone()).await.unwrap(),
                    Dispatched::Replayed(cancelled)
                );
            }
            Some(_) => {
                let e = cancelled.expect_err("the provider took one key for two requests");
                assert_eq!(e.kind, ErrorKind::Http, "{e}");
                assert_eq!(e.response().unwrap()["status"], 417, "{e}");
                assert_eq!(counts["executions"], 1, "{counts}");
                assert_eq!(counts["misused"], 1, "{counts}");
            }
        }
    }
}
