//! One behaviour suite over every store: the same scenarios against `MemoryStore` and
//! against `PgStore` on a real PostgreSQL with the extension (`PGIDEM_DSN`, by default the
//! private PostgreSQL 18 cluster's `pgidem_it` database).

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::*;
use idempotency::*;
use serde_json::json;

fn claimed(b: Begin) -> Claim {
    match b {
        Begin::Claimed(c) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

fn opts() -> BeginOptions {
    BeginOptions::default()
}

async fn a_retry_replays_and_a_duplicate_waits(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("replay");
    let o = BeginOptions {
        request: Some(json!({"to": "ann@example.com"})),
        ..opts()
    };
    let c = claimed(s.begin(&sc, "k", &o).await.unwrap());
    assert_eq!(c.attempt, 1);
    match s.begin(&sc, "k", &o).await.unwrap() {
        Begin::InProgress(p) => {
            assert_eq!(p.upstream_key, c.upstream_key);
            assert!(p.retry_after > Duration::ZERO);
        }
        other => panic!("{other:?}"),
    }
    let done = s
        .complete(&sc, "k", c.fence, Some(&json!({"id": 7})), true, None)
        .await
        .unwrap();
    assert_eq!(done, Completed::Succeeded);
    // Completing again with the same fence keeps the stored result.
    s.complete(&sc, "k", c.fence, Some(&json!({"id": 8})), true, None)
        .await
        .unwrap();
    match s.begin(&sc, "k", &o).await.unwrap() {
        Begin::Replay(r) => {
            assert!(r.succeeded);
            assert_eq!(r.response, Some(json!({"id": 7})));
            assert_eq!(r.upstream_key, c.upstream_key);
        }
        other => panic!("{other:?}"),
    }
    let rec = s.lookup(&sc, "k").await.unwrap().unwrap();
    assert_eq!(rec.state, State::Succeeded);
    assert_eq!(
        rec.fingerprint,
        Some(canon::hash_value(&json!({"to": "ann@example.com"})).unwrap())
    );
}

async fn failures_are_rerun_unless_cached(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("failures");
    let c = claimed(s.begin(&sc, "k", &opts()).await.unwrap());
    assert_eq!(
        s.complete(&sc, "k", c.fence, None, false, None)
            .await
            .unwrap(),
        Completed::Absent
    );
    let c = claimed(s.begin(&sc, "k", &opts()).await.unwrap());
    assert_eq!(c.attempt, 1);
    assert_eq!(
        s.complete(
            &sc,
            "k",
            c.fence,
            Some(&json!("declined")),
            false,
            Some(true)
        )
        .await
        .unwrap(),
        Completed::Failed
    );
    match s.begin(&sc, "k", &opts()).await.unwrap() {
        Begin::Replay(r) => assert!(!r.succeeded),
        other => panic!("{other:?}"),
    }
    let ff = BeginOptions {
        on_cache_hit: Some(OnCacheHit::FailFast),
        ..opts()
    };
    assert_eq!(
        s.begin(&sc, "k", &ff).await.unwrap_err().kind,
        ErrorKind::RepeatRefused
    );
    let rerun = BeginOptions {
        on_cache_hit: Some(OnCacheHit::ReturnCachedIfSuccess),
        ..opts()
    };
    let again = claimed(s.begin(&sc, "k", &rerun).await.unwrap());
    assert_eq!(again.attempt, 2);
    assert!(!again.recovered);
    assert_eq!(again.upstream_key, c.upstream_key);
}

async fn a_different_request_is_a_mismatch(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("mismatch");
    let one = BeginOptions {
        request: Some(json!({"amount": 1})),
        ..opts()
    };
    let two = BeginOptions {
        request: Some(json!({"amount": 2})),
        ..opts()
    };
    claimed(s.begin(&sc, "k", &one).await.unwrap());
    assert_eq!(
        s.begin(&sc, "k", &two).await.unwrap_err().kind,
        ErrorKind::Mismatch
    );
    let ignore = BeginOptions {
        on_mismatch: Some(OnMismatch::Ignore),
        ..two
    };
    assert!(matches!(
        s.begin(&sc, "k", &ignore).await.unwrap(),
        Begin::InProgress(_)
    ));
}

async fn a_lapsed_lease_is_taken_over_and_the_old_fence_refused(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("takeover");
    let short = BeginOptions {
        lease: Some(Duration::from_millis(100)),
        ..opts()
    };
    let first = claimed(s.begin(&sc, "k", &short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = claimed(s.begin(&sc, "k", &opts()).await.unwrap());
    assert!(second.recovered);
    assert_eq!(second.attempt, 2);
    assert!(second.fence > first.fence);
    assert_eq!(second.upstream_key, first.upstream_key);
    for e in [
        s.complete(&sc, "k", first.fence, None, true, None)
            .await
            .unwrap_err(),
        s.release(&sc, "k", first.fence).await.unwrap_err(),
        s.extend(&sc, "k", first.fence, None).await.unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::LeaseLost);
    }
    assert!(s
        .extend(&sc, "k", second.fence, Some(Duration::from_secs(120)))
        .await
        .is_ok());
    s.release(&sc, "k", second.fence).await.unwrap();
    assert!(s.lookup(&sc, "k").await.unwrap().is_none());
}

async fn a_repeat_with_the_claim_token_gets_the_claim_back(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("token");
    let token = BeginOptions {
        claim_token: Some(uuid::Uuid::new_v4()),
        lease: Some(Duration::from_millis(300)),
        ..opts()
    };
    let first = claimed(s.begin(&sc, "k", &token).await.unwrap());
    // The same attempt again (its answer lost): the same claim, even with a wait.
    let waiting = BeginOptions {
        wait: Duration::from_secs(30),
        ..token.clone()
    };
    assert_eq!(claimed(s.begin(&sc, "k", &waiting).await.unwrap()), first);
    // Another attempt, or none, finds it running.
    let other = BeginOptions {
        claim_token: Some(uuid::Uuid::new_v4()),
        ..opts()
    };
    for o in [&other, &opts()] {
        assert!(matches!(
            s.begin(&sc, "k", o).await.unwrap(),
            Begin::InProgress(_)
        ));
    }
    // Once the lease lapsed, the same token takes over like any caller; its repeat says so.
    let taken = loop {
        match s.begin(&sc, "k", &token).await.unwrap() {
            Begin::Claimed(c) if c.fence != first.fence => break c,
            Begin::Claimed(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            other => panic!("{other:?}"),
        }
    };
    assert!(taken.recovered);
    assert!(taken.fence > first.fence);
    assert_eq!(claimed(s.begin(&sc, "k", &token).await.unwrap()), taken);
    s.complete(&sc, "k", taken.fence, Some(&json!({"ok": 1})), true, None)
        .await
        .unwrap();
    assert!(matches!(
        s.begin(&sc, "k", &token).await.unwrap(),
        Begin::Replay(_)
    ));
}

async fn a_waiting_duplicate_gets_the_replay(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("wait");
    let c = claimed(s.begin(&sc, "k", &opts()).await.unwrap());
    let (s2, sc2) = (s.clone(), sc.clone());
    let waiter = tokio::spawn(async move {
        let o = BeginOptions {
            wait: Duration::from_secs(10),
            ..BeginOptions::default()
        };
        s2.begin(&sc2, "k", &o).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.complete(&sc, "k", c.fence, Some(&json!(1)), true, None)
        .await
        .unwrap();
    match waiter.await.unwrap().unwrap() {
        Begin::Replay(r) => assert_eq!(r.response, Some(json!(1))),
        other => panic!("{other:?}"),
    }
}

async fn concurrent_begins_give_one_claim(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("race");
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (s, sc) = (s.clone(), sc.clone());
            tokio::spawn(async move { s.begin(&sc, "k", &BeginOptions::default()).await })
        })
        .collect();
    let mut claims = 0;
    for t in tasks {
        if let Begin::Claimed(_) = t.await.unwrap().unwrap() {
            claims += 1;
        }
    }
    assert_eq!(claims, 1);
}

async fn bad_arguments_are_refused(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("bad");
    assert_eq!(
        s.begin(&sc, " ", &opts()).await.unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        s.begin("", "k", &opts()).await.unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        s.begin(&sc, &"k".repeat(513), &opts())
            .await
            .unwrap_err()
            .kind,
        ErrorKind::InvalidArgument
    );
    let bad = BeginOptions {
        ttl: Some(Duration::from_secs(60)),
        lease: Some(Duration::from_secs(120)),
        ..opts()
    };
    assert_eq!(
        s.begin(&sc, "k", &bad).await.unwrap_err().kind,
        ErrorKind::InvalidArgument
    );
    assert!(s.lookup(&sc, "k").await.unwrap().is_none());
}

async fn expired_records_are_absent_and_purged(s: Arc<dyn IdempotencyStore>) {
    let sc = unique("expiry");
    let short = BeginOptions {
        ttl: Some(Duration::from_millis(100)),
        ..opts()
    };
    let first = claimed(s.begin(&sc, "k", &short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(s.lookup(&sc, "k").await.unwrap().is_none());
    // Purged, or (on Redis) already removed by the server's own expiry.
    s.purge().await.unwrap();
    assert!(s.lookup(&sc, "k").await.unwrap().is_none());
    let fresh = claimed(s.begin(&sc, "k", &opts()).await.unwrap());
    assert_eq!(fresh.attempt, 1);
    assert_ne!(fresh.upstream_key, first.upstream_key);
}

macro_rules! suite {
    ($store:ident, $make:expr) => {
        mod $store {
            use super::*;
            async fn store() -> Option<Arc<dyn IdempotencyStore>> {
                $make
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn replay() {
                if let Some(s) = store().await {
                    a_retry_replays_and_a_duplicate_waits(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn failures() {
                if let Some(s) = store().await {
                    failures_are_rerun_unless_cached(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn mismatch() {
                if let Some(s) = store().await {
                    a_different_request_is_a_mismatch(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn takeover() {
                if let Some(s) = store().await {
                    a_lapsed_lease_is_taken_over_and_the_old_fence_refused(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn claim_token() {
                if let Some(s) = store().await {
                    a_repeat_with_the_claim_token_gets_the_claim_back(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn wait() {
                if let Some(s) = store().await {
                    a_waiting_duplicate_gets_the_replay(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn race() {
                if let Some(s) = store().await {
                    concurrent_begins_give_one_claim(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn bad_arguments() {
                if let Some(s) = store().await {
                    bad_arguments_are_refused(s).await
                }
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn expiry() {
                if let Some(s) = store().await {
                    expired_records_are_absent_and_purged(s).await
                }
            }
        }
    };
}

suite!(memory, Some(Arc::new(MemoryStore::new())));
#[cfg(feature = "redis")]
suite!(redis, redis_store().await);
suite!(postgres, {
    let store = PgStore::new(pool());
    store
        .check_installed()
        .await
        .expect("pg_idempotency installed in PGIDEM_DSN");
    Some(Arc::new(store))
});

/// A claim in the caller's own transaction: rolled back, it vanishes.
#[tokio::test]
async fn postgres_claims_inside_the_callers_transaction() {
    let (mut client, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let sc = unique("tx");
    {
        let tx = client.transaction().await.unwrap();
        let store = PgStore::new(&tx);
        claimed(store.begin(&sc, "k", &opts()).await.unwrap());
        tx.rollback().await.unwrap();
    }
    let store = PgStore::new(&client);
    assert!(store.lookup(&sc, "k").await.unwrap().is_none());
}

#[tokio::test]
async fn postgres_without_the_extension_fails_fast() {
    let (client, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("SET search_path = pg_catalog")
        .await
        .unwrap();
    let e = PgStore::new(&client).check_installed().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotInstalled);
}

/// A session ended by the server mid-call (FATAL, here `pg_terminate_backend` of a begin
/// waiting on a held key) is an unknown outcome to the caller: the call may have committed
/// before the session ended, so the caller repeats it to learn (with its claim token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_session_ended_mid_call_is_an_unknown_outcome() {
    let (holder, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let (waiter, conn) = tokio_postgres::connect(&dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let pid: i32 = waiter
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let sc = unique("fatal");
    claimed(
        PgStore::new(&holder)
            .begin(&sc, "k", &opts())
            .await
            .unwrap(),
    );
    let wait = BeginOptions {
        wait: Duration::from_secs(60),
        claim_token: Some(uuid::Uuid::new_v4()),
        ..opts()
    };
    let call = tokio::spawn(async move { PgStore::new(&waiter).begin(&sc, "k", &wait).await });
    // Ended once it is seen waiting inside idem_begin.
    let mut seen = false;
    for _ in 0..500 {
        let n: i64 = holder
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' \
                 AND query LIKE '%idem_begin%'",
                &[&pid],
            )
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(seen, "the waiting begin was never seen");
    holder
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let err = call.await.unwrap().expect_err("the session was ended");
    assert!(err.outcome_unknown(), "{err:?}");
}
