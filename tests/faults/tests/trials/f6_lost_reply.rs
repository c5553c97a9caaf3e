//! F6, a reply dropped after commit: the server commits a claim or a completion and the
//! connection breaks before its answer reaches the client (the proxy forwards the reply up
//! to its CommandComplete, withholds the rest and closes once the server's ReadyForQuery
//! proves the commit). The client cannot tell whether the operation took effect; these
//! tests show what it can do about it and that no invariant breaks:
//!
//! - a completion whose reply was lost is completed again with the same fence and gets the
//!   stored state; one effect, and a later begin replays the result;
//! - a changed request under that key is still a mismatch (IK001);
//! - a claim whose reply was lost is given back at once to a repeat with its claim token
//!   (0.3.0), by hand and through the Rust client's dispatcher; without a token it holds
//!   the key until its lease lapses;
//! - client tasks racing on hot keys while the replies of random statements are lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pg_idempotency_faults::clock::Clock;
use pg_idempotency_faults::crash_server::{backend_name, major_version};
use pg_idempotency_faults::history::{Event, Op, Outcome, Run};
use pg_idempotency_faults::proxy::{Fault, Proxy, Trigger, Upstream};
use pg_idempotency_faults::report::{self, Tally};
use pg_idempotency_faults::run::{self, Choices, Conn, Workload};
use pg_idempotency_faults::{check, ledger};
use pg_idempotency_tests as suite;
use serde_json::{json, Value};
use tokio_postgres::Client;

/// Every database of this file starts with it.
const PREFIX: &str = "pgidem_faults_f6";

/// A fresh database with the backend under test and a fresh ledger, for one test.
async fn databases(name: &str) -> (String, String) {
    let db = format!("{PREFIX}_{name}");
    tokio::task::spawn_blocking(move || {
        let server = suite::fresh_database(&db);
        suite::install(&server);
        let ledger = suite::fresh_database(&format!("{db}_ledger"));
        (server, ledger)
    })
    .await
    .unwrap()
}

async fn drop_databases(name: &str) {
    let db = format!("{PREFIX}_{name}");
    tokio::task::spawn_blocking(move || {
        suite::drop_database(&db);
        suite::drop_database(&format!("{db}_ledger"));
    })
    .await
    .unwrap();
}

/// A proxy in front of the server of `dsn`, and the DSN of a client task going through it
/// (named like the runner's sessions).
async fn proxy_for(dsn: &str) -> (Proxy, String) {
    let proxy = Proxy::start(Upstream::from_dsn(dsn).unwrap())
        .await
        .unwrap();
    let through = format!("{} application_name={}", proxy.dsn(dsn), run::APPLICATION);
    (proxy, through)
}

fn workload(scope: &str, lease: &str) -> Workload {
    Workload {
        processes: 1,
        keys: 1,
        calls_per_process: 1,
        scope: scope.to_string(),
        lease: lease.to_string(),
        ttl: "1 hour".into(),
        seed: 0,
    }
}

fn lose_the_reply_of(statement: &str) -> Fault {
    Fault::DropReplyAfterCommit(Trigger::QueryContains(statement.into()))
}

/// A history written by hand: the operations one client task makes, on the run's clock.
struct Story {
    clock: Clock,
    events: Vec<Event>,
}

impl Story {
    fn new() -> Story {
        Story {
            clock: Clock::start(),
            events: Vec::new(),
        }
    }

    fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Records an operation invoked at `invoked` that was just answered `outcome`.
    fn record(&mut self, key: &str, op: Op, invoked: i64, outcome: Outcome) -> Outcome {
        let returned = (!matches!(outcome, Outcome::Indeterminate { .. })).then(|| self.now());
        self.events.push(Event {
            process: 0,
            key: key.to_string(),
            op,
            invoked,
            returned,
            outcome: outcome.clone(),
        });
        outcome
    }

    /// The run: the history, the ledger and the records of `scope` as they are now.
    async fn finish(self, server: &Client, ledger_dsn: &str, scope: &str) -> Run {
        let ledger_client = ledger::connect(ledger_dsn).await.unwrap();
        Run {
            ledger: ledger::rows(&ledger_client, self.clock.start_epoch_micros)
                .await
                .unwrap(),
            records: run::final_records(server, scope, self.clock).await.unwrap(),
            events: self.events,
            ttl_micros: None,
            observed: None,
        }
    }
}

/// The stored record of a key, read by the superuser: state, fence, attempt, upstream
/// key, response.
async fn stored(
    direct: &Client,
    scope: &str,
    key: &str,
) -> (String, i64, i32, uuid::Uuid, Option<Value>) {
    let r = direct
        .query_one(
            "SELECT state, fence, attempt, upstream_key, response \
             FROM idempotency.records WHERE scope = $1 AND key = $2",
            &[&scope, &key],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))
}

fn assert_clean(run: &Run, what: &str) {
    let violations = check::check(run);
    assert!(
        violations.is_empty(),
        "{what}: {}\n{:#?}",
        violations
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        run.events
    );
}

/// A completion whose reply is lost: the server has stored the result, the client saw an
/// I/O error. The client completes again with the same fence (a real client's retry) and
/// is told the stored state; a retry with another response keeps the stored one; another
/// fence is refused; a later begin replays the result; the ledger holds one effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_reply_was_lost_is_completed_again_with_its_fence() {
    let name = "complete";
    let (server, ledger_dsn) = databases(name).await;
    ledger::create(&ledger_dsn).await.unwrap();
    let direct = ledger::connect(&server).await.unwrap();
    let (proxy, through) = proxy_for(&server).await;
    let mut conn = Conn::new(&through);
    let scope = suite::scope("f6");
    let w = workload(&scope, "30 seconds");
    let key = "k1";
    let mut story = Story::new();

    let t = story.now();
    let claimed = run::begin(conn.get().await, &w, key).await;
    let Outcome::Claimed {
        fence,
        upstream_key,
        ..
    } = story.record(key, Op::Begin, t, claimed.clone())
    else {
        panic!("the first begin claims: {claimed:?}");
    };
    let l = ledger::connect(&ledger_dsn).await.unwrap();
    let t = story.now();
    let applied = ledger::apply(&l, key, fence, upstream_key).await;
    let op = Op::Effect {
        fence,
        upstream_key,
    };
    assert_eq!(story.record(key, op, t, applied), Outcome::Done);

    // The completion commits; its answer never arrives.
    proxy.set_once(lose_the_reply_of("idem_complete"));
    let response = json!({"sent": "receipt-1"});
    let t = story.now();
    let lost = run::complete(conn.get().await, &w, key, fence, &response).await;
    conn.settle(&lost);
    let op = Op::Complete {
        fence,
        response: response.clone(),
    };
    let lost = story.record(key, op.clone(), t, lost);
    assert!(
        matches!(lost, Outcome::Indeterminate { .. }),
        "the client must not learn the outcome: {lost:?}"
    );
    assert_eq!(proxy.fired(), 1);
    let (state, stored_fence, _, _, stored_response) = stored(&direct, &scope, key).await;
    assert_eq!(
        (state.as_str(), stored_fence, stored_response.as_ref()),
        ("succeeded", fence, Some(&response)),
        "the completion whose reply was lost is committed"
    );

    // The client's retry, on a new connection, with the same fence: the stored state.
    let t = story.now();
    let again = run::complete(conn.get().await, &w, key, fence, &response).await;
    assert_eq!(
        story.record(key, op, t, again),
        Outcome::Completed {
            state: "succeeded".into()
        }
    );
    // A retry that rebuilt its response differently changes nothing (left out of the
    // history: the checker takes a retry to carry the response it repeats).
    let rebuilt = json!({"sent": "receipt-1", "rebuilt": true});
    assert_eq!(
        run::complete(conn.get().await, &w, key, fence, &rebuilt).await,
        Outcome::Completed {
            state: "succeeded".into()
        }
    );
    assert_eq!(stored(&direct, &scope, key).await.4, Some(response.clone()));
    // Only the fence that completed the record may complete it again.
    let other = Op::Complete {
        fence: fence + 1,
        response: response.clone(),
    };
    let t = story.now();
    let foreign = run::complete(conn.get().await, &w, key, fence + 1, &response).await;
    assert_eq!(
        story.record(key, other, t, foreign),
        Outcome::Failed {
            sqlstate: "IK003".into()
        }
    );
    // A duplicate of the call replays the result.
    let t = story.now();
    let replay = run::begin(conn.get().await, &w, key).await;
    assert_eq!(
        story.record(key, Op::Begin, t, replay),
        Outcome::Replay {
            succeeded: true,
            response: Some(response.clone())
        }
    );
    assert_eq!(proxy.fired(), 1, "one fault, on the first completion only");

    let run = story.finish(&direct, &ledger_dsn, &scope).await;
    assert_eq!(run.ledger.len(), 1, "one effect: {:?}", run.ledger);
    assert_eq!(
        run.events.iter().filter(|e| e.is_indeterminate()).count(),
        1
    );
    assert_clean(&run, "a completion whose reply was lost");
    drop((direct, conn, proxy));
    drop_databases(name).await;
}

const BEGIN_WITH_REQUEST: &str = "SELECT outcome, fence, upstream_key, succeeded, response \
     FROM idem_begin($1, $2, $3::jsonb, lease => '30 seconds', ttl => '1 hour')";

/// `idem_begin` with a request (its fingerprint is stored), as an outcome.
async fn begin_with_request(c: &Client, scope: &str, key: &str, request: &Value) -> Outcome {
    match c
        .query_one(BEGIN_WITH_REQUEST, &[&scope, &key, request])
        .await
    {
        Ok(row) => match row.get::<_, String>(0).as_str() {
            "claimed" => Outcome::Claimed {
                fence: row.get(1),
                attempt: 1,
                recovered: false,
                upstream_key: row.get(2),
            },
            "replay" => Outcome::Replay {
                succeeded: row.get(3),
                response: row.get(4),
            },
            _ => Outcome::InProgress,
        },
        Err(e) => run::failure(&e),
    }
}

/// A call begun with its request, completed, the completion's reply lost; then the same key
/// with another request is a mismatch (IK001), and the same request replays the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_request_after_a_lost_completion_reply_is_a_mismatch() {
    let name = "mismatch";
    let (server, ledger_dsn) = databases(name).await;
    ledger::create(&ledger_dsn).await.unwrap();
    let direct = ledger::connect(&server).await.unwrap();
    let (proxy, through) = proxy_for(&server).await;
    let mut conn = Conn::new(&through);
    let scope = suite::scope("f6");
    let w = workload(&scope, "30 seconds");
    let key = "pay-7";
    let request = json!({"to": "acct-1", "amount": 100});
    let changed = json!({"to": "acct-1", "amount": 900});
    let mut story = Story::new();

    // The first begin is the one that claims (a fresh scope): attempt 1, not recovered.
    let t = story.now();
    let claimed = begin_with_request(conn.get().await, &scope, key, &request).await;
    let Outcome::Claimed {
        fence,
        upstream_key,
        ..
    } = story.record(key, Op::Begin, t, claimed.clone())
    else {
        panic!("the first begin claims: {claimed:?}");
    };
    let l = ledger::connect(&ledger_dsn).await.unwrap();
    let t = story.now();
    let applied = ledger::apply(&l, key, fence, upstream_key).await;
    let op = Op::Effect {
        fence,
        upstream_key,
    };
    assert_eq!(story.record(key, op, t, applied), Outcome::Done);
    proxy.set_once(lose_the_reply_of("idem_complete"));
    let response = json!({"paid": 100});
    let t = story.now();
    let lost = run::complete(conn.get().await, &w, key, fence, &response).await;
    conn.settle(&lost);
    let op = Op::Complete {
        fence,
        response: response.clone(),
    };
    assert!(matches!(
        story.record(key, op, t, lost),
        Outcome::Indeterminate { .. }
    ));
    assert_eq!(proxy.fired(), 1);

    let t = story.now();
    let mismatch = begin_with_request(conn.get().await, &scope, key, &changed).await;
    assert_eq!(
        story.record(key, Op::Begin, t, mismatch),
        Outcome::Failed {
            sqlstate: "IK001".into()
        },
        "another request under the key of a completed call"
    );
    let t = story.now();
    let replay = begin_with_request(conn.get().await, &scope, key, &request).await;
    assert_eq!(
        story.record(key, Op::Begin, t, replay),
        Outcome::Replay {
            succeeded: true,
            response: Some(response.clone())
        },
        "the same request replays the result whose reply was lost"
    );

    let run = story.finish(&direct, &ledger_dsn, &scope).await;
    assert_eq!(run.ledger.len(), 1, "one effect: {:?}", run.ledger);
    assert_clean(&run, "a changed request after a lost completion reply");
    drop((direct, conn, proxy));
    drop_databases(name).await;
}

/// The lease of the claims in the lost-claim tests: short, since the caller without a token
/// waits it out.
const SHORT_LEASE: Duration = Duration::from_millis(500);

/// The rest of a claimed call, as a client goes on: its one effect, its completion, and a
/// replay of the result.
async fn effect_complete_replay(
    story: &mut Story,
    conn: &mut Conn,
    ledger_dsn: &str,
    w: &Workload,
    key: &str,
    fence: i64,
    upstream_key: uuid::Uuid,
) {
    let l = ledger::connect(ledger_dsn).await.unwrap();
    let t = story.now();
    let applied = ledger::apply(&l, key, fence, upstream_key).await;
    let op = Op::Effect {
        fence,
        upstream_key,
    };
    assert_eq!(story.record(key, op, t, applied), Outcome::Done);
    let response = json!({"sent": fence});
    let op = Op::Complete {
        fence,
        response: response.clone(),
    };
    let t = story.now();
    let done = run::complete(conn.get().await, w, key, fence, &response).await;
    assert_eq!(
        story.record(key, op, t, done),
        Outcome::Completed {
            state: "succeeded".into()
        }
    );
    let t = story.now();
    let replay = run::begin(conn.get().await, w, key).await;
    assert_eq!(
        story.record(key, Op::Begin, t, replay),
        Outcome::Replay {
            succeeded: true,
            response: Some(response)
        }
    );
}

/// A claim whose reply was lost, repeated with its claim token (0.3.0): the repeat gets the
/// claim back at once, the same fence, attempt 1, not recovered, and the call goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_was_lost_is_given_back_to_its_repeat() {
    let name = "claim_token";
    let (server, ledger_dsn) = databases(name).await;
    ledger::create(&ledger_dsn).await.unwrap();
    let direct = ledger::connect(&server).await.unwrap();
    let (proxy, through) = proxy_for(&server).await;
    let mut conn = Conn::new(&through);
    let scope = suite::scope("f6");
    // A long lease: a repeat that had to wait it out would fail the test's bound below.
    let w = workload(&scope, "1 hour");
    let key = "k1";
    let token = uuid::Uuid::new_v4();
    let mut story = Story::new();

    proxy.set_once(lose_the_reply_of("idem_begin"));
    let lost_at = story.now();
    let lost = run::begin_with_token(conn.get().await, &w, key, Some(token)).await;
    conn.settle(&lost);
    assert!(
        matches!(
            story.record(key, Op::Begin, lost_at, lost.clone()),
            Outcome::Indeterminate { .. }
        ),
        "the client must not learn the outcome: {lost:?}"
    );
    assert_eq!(proxy.fired(), 1);
    let (state, lost_fence, _, lost_upstream, _) = stored(&direct, &scope, key).await;
    assert_eq!(
        state, "in_progress",
        "the claim whose reply was lost is committed"
    );

    let t = story.now();
    let again = run::begin_with_token(conn.get().await, &w, key, Some(token)).await;
    conn.settle(&again);
    assert_eq!(
        story.record(key, Op::Begin, t, again),
        Outcome::Claimed {
            fence: lost_fence,
            attempt: 1,
            recovered: false,
            upstream_key: lost_upstream,
        },
        "the repeat gets the lost claim back"
    );
    // Another attempt (no token) still finds the call running.
    let t = story.now();
    let other = run::begin(conn.get().await, &w, key).await;
    assert_eq!(story.record(key, Op::Begin, t, other), Outcome::InProgress);

    effect_complete_replay(
        &mut story,
        &mut conn,
        &ledger_dsn,
        &w,
        key,
        lost_fence,
        lost_upstream,
    )
    .await;
    let run = story.finish(&direct, &ledger_dsn, &scope).await;
    assert_eq!(run.ledger.len(), 1, "one effect: {:?}", run.ledger);
    assert_clean(
        &run,
        "a claim whose reply was lost, repeated with its token",
    );
    drop((direct, conn, proxy));
    drop_databases(name).await;
}

/// A claim whose reply was lost, repeated WITHOUT a claim token (as every 0.2.0 caller
/// did): the repeat is a duplicate like any other, answered `in_progress` until the lease
/// of the claim it made (and never learned) lapses; then it takes its own call over with
/// `recovered = true`, the next attempt, a higher fence and the same upstream key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_a_lost_claim_waits_out_its_lease() {
    let name = "claim";
    let (server, ledger_dsn) = databases(name).await;
    ledger::create(&ledger_dsn).await.unwrap();
    let direct = ledger::connect(&server).await.unwrap();
    let (proxy, through) = proxy_for(&server).await;
    let mut conn = Conn::new(&through);
    let scope = suite::scope("f6");
    let lease = format!("{} milliseconds", SHORT_LEASE.as_millis());
    let w = workload(&scope, &lease);
    let key = "k1";
    let mut story = Story::new();

    proxy.set_once(lose_the_reply_of("idem_begin"));
    let lost_at = story.now();
    let lost = run::begin(conn.get().await, &w, key).await;
    conn.settle(&lost);
    assert!(
        matches!(
            story.record(key, Op::Begin, lost_at, lost.clone()),
            Outcome::Indeterminate { .. }
        ),
        "the client must not learn the outcome: {lost:?}"
    );
    assert_eq!(proxy.fired(), 1);
    let (state, lost_fence, lost_attempt, lost_upstream, _) = stored(&direct, &scope, key).await;
    assert_eq!(
        (state.as_str(), lost_attempt),
        ("in_progress", 1),
        "the claim whose reply was lost is committed"
    );

    // The caller retries its begin, polling until it is no longer in progress: waiting for
    // the lease to lapse is waiting for time itself.
    let mut in_progress = 0;
    let (outcome, claimed_at) = loop {
        let t = story.now();
        let answer = run::begin(conn.get().await, &w, key).await;
        conn.settle(&answer);
        let answer = story.record(key, Op::Begin, t, answer);
        if answer != Outcome::InProgress {
            break (answer, story.events.last().unwrap().returned.unwrap());
        }
        in_progress += 1;
        assert!(
            story.now() - lost_at < 30_000_000,
            "still in progress 30 s after a claim with a lease of {lease}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let Outcome::Claimed {
        fence,
        attempt,
        recovered,
        upstream_key,
    } = outcome
    else {
        panic!("the retry ends in a claim: {outcome:?}");
    };
    let waited = Duration::from_micros((claimed_at - lost_at) as u64);
    println!(
        "F6 lost claim without a token ({}, PostgreSQL {}): the caller's retry was answered \
         in_progress {} times and took its own call over after {} ms (lease {} ms)",
        backend_name(),
        major_version(&direct).await,
        in_progress,
        waited.as_millis(),
        SHORT_LEASE.as_millis()
    );
    assert!(in_progress > 0, "a lost claim is in progress for its retry");
    assert!(
        waited >= SHORT_LEASE,
        "the takeover came after the lease: waited {waited:?}"
    );
    assert!(recovered, "the retry takes over a lapsed lease");
    assert_eq!(attempt, lost_attempt + 1);
    assert!(
        fence > lost_fence,
        "fence {fence} after the lost {lost_fence}"
    );
    assert_eq!(
        upstream_key, lost_upstream,
        "the same call, the same upstream key"
    );

    effect_complete_replay(
        &mut story,
        &mut conn,
        &ledger_dsn,
        &w,
        key,
        fence,
        upstream_key,
    )
    .await;
    let run = story.finish(&direct, &ledger_dsn, &scope).await;
    assert_eq!(run.ledger.len(), 1, "one effect: {:?}", run.ledger);
    assert_clean(&run, "a claim whose reply was lost");
    drop((direct, conn, proxy));
    drop_databases(name).await;
}

/// The Rust client's dispatcher over a pool through the proxy: the reply of its claim is
/// lost, the dispatch fails with an unknown outcome, and the caller's next dispatch of the
/// same call gets the claim back (the dispatcher repeats the attempt's token) and runs the
/// tool, once, with the lost claim's fence; a lease of an hour shows nothing was waited out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_picks_up_a_claim_whose_reply_was_lost() {
    use pg_idempotency_client::{tool_fn, Dispatched, Dispatcher, Idempotent, PgStore, ToolSpec};
    use std::sync::atomic::AtomicU32;

    let name = "dispatcher";
    let (server, _ledger_dsn) = databases(name).await;
    let direct = ledger::connect(&server).await.unwrap();
    let (proxy, through) = proxy_for(&server).await;
    let config: tokio_postgres::Config = through.parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()
        .unwrap();
    let sent = Arc::new(AtomicU32::new(0));
    let counter = sent.clone();
    let tool = suite::scope("f6_send_email");
    let agent = Dispatcher::new(Arc::new(PgStore::new(pool)));
    agent
        .register(
            ToolSpec::new(
                &tool,
                tool_fn(move |_input: Value| {
                    let counter = counter.clone();
                    async move { Ok(json!({"email_id": counter.fetch_add(1, Ordering::SeqCst) + 1})) }
                }),
            )
            .idempotent(Idempotent {
                lease: Some(Duration::from_secs(3600)),
                ..Idempotent::default()
            }),
        )
        .unwrap();
    let input = json!({"to": "ann@example.com"});

    proxy.set_once(lose_the_reply_of("idem_begin"));
    let lost = agent
        .dispatch(&tool, input.clone())
        .await
        .expect_err("the claim's reply was lost");
    assert!(lost.outcome_unknown(), "{lost:?}");
    assert_eq!(proxy.fired(), 1);
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    let (state, lost_fence, ..) = stored_of_scope(&direct, &tool).await;
    assert_eq!(state, "in_progress", "the lost claim is committed");

    let again = agent.dispatch(&tool, input.clone()).await.unwrap();
    assert_eq!(again, Dispatched::Ran(json!({"email_id": 1})));
    let (state, fence, attempt) = stored_of_scope(&direct, &tool).await;
    assert_eq!(
        (state.as_str(), fence, attempt),
        ("succeeded", lost_fence, 1),
        "the lost claim itself was completed"
    );
    assert_eq!(
        agent.dispatch(&tool, input).await.unwrap(),
        Dispatched::Replayed(json!({"email_id": 1}))
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1, "one email");
    println!(
        "F6 lost claim through the dispatcher ({}, PostgreSQL {}): picked up at fence {fence}",
        backend_name(),
        major_version(&direct).await
    );
    drop((direct, agent, proxy));
    drop_databases(name).await;
}

/// The one record of a scope: state, fence, attempt.
async fn stored_of_scope(direct: &Client, scope: &str) -> (String, i64, i32) {
    let r = direct
        .query_one(
            "SELECT state, fence, attempt FROM idempotency.records WHERE scope = $1",
            &[&scope],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// Keeps a lost reply in force during a run: whenever the last one has been taken (or none
/// was taken for a while: every connection may be past its n), arms another, for the nth
/// query of whichever connection reaches it first (n drawn anew each time) or for the next
/// completion. n starts at 2: the runner reads the final records on a connection of their
/// own, with one query, which is never hit.
async fn keep_losing_replies(proxy: Arc<Proxy>, seed: u64, stop: Arc<AtomicBool>) {
    let mut choices = Choices::new(seed);
    while !stop.load(Ordering::SeqCst) {
        // Most statements are begins; every other fault is kept for the next completion,
        // so that lost completion replies are frequent too.
        let trigger = match choices.below(2) {
            0 => Trigger::NthQuery(2 + choices.below(20) as u64),
            _ => Trigger::QueryContains("idem_complete".into()),
        };
        proxy.set_once(Fault::DropReplyAfterCommit(trigger));
        for _ in 0..20 {
            if stop.load(Ordering::SeqCst) || proxy.fault() == Fault::None {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    proxy.set(Fault::None);
}

/// One randomized trial: client tasks race on hot keys through the proxy while the replies
/// of random statements are lost; they complete again after a lost completion reply.
async fn trial(server: &str, ledger_dsn: &str, seed: u64) -> (Run, usize) {
    // The runner names its sessions itself: the proxy's DSN goes to it as it is.
    let (proxy, _) = proxy_for(server).await;
    let proxy = Arc::new(proxy);
    let stop = Arc::new(AtomicBool::new(false));
    let faults = tokio::spawn(keep_losing_replies(proxy.clone(), seed, stop.clone()));
    let w = Workload {
        processes: 6,
        // Enough keys that claims and completions go on all through the trial (with a
        // few, every call soon replays), few enough that duplicates race on each.
        keys: 32,
        calls_per_process: 120,
        scope: format!("f6-trial-{seed}"),
        // Short: a claim whose reply was lost is taken over within the trial.
        lease: "100 milliseconds".into(),
        ttl: "1 hour".into(),
        seed,
    };
    let retries = run::Retries {
        lost_completion: 3,
        lost_claim: 3,
    };
    let run = run::run(
        &proxy.dsn(server),
        ledger_dsn,
        w,
        run::Options::default().retries(retries),
    )
    .await
    .unwrap();
    stop.store(true, Ordering::SeqCst);
    faults.await.unwrap();
    (run, proxy.fired() as usize)
}

/// The randomized variant: several lost replies per trial, every trial checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_tasks_survive_lost_replies_of_random_statements() {
    let name = "random";
    let (server, ledger_dsn) = databases(name).await;
    ledger::create(&ledger_dsn).await.unwrap();
    let direct = ledger::connect(&server).await.unwrap();
    let ledger_direct = ledger::connect(&ledger_dsn).await.unwrap();
    let mut tally = Tally::new("F6 lost replies");
    let mut retried_and_told = 0;
    let mut given_back = 0;
    let started = std::time::Instant::now();
    for n in 0..report::trials(8) {
        // The ledger's keys are the run's (k0, k1, ...): each trial starts from an empty one.
        ledger_direct
            .batch_execute("TRUNCATE effects, fences")
            .await
            .unwrap();
        let (run, fired) = trial(&server, &ledger_dsn, 600 + n as u64).await;
        let violations = check::check(&run);
        tally.add(&run, fired, &violations);
        let lost = run.events.iter().filter(|e| e.is_indeterminate()).count();
        let lost_begins = count(&run, |e| e.op == Op::Begin && e.is_indeterminate());
        let takeovers = report::takeovers(&run);
        println!(
            "trial {n}: {fired} replies lost ({lost_begins} of begins), {lost} of {} operations \
             unknown, {takeovers} takeovers, {} ms so far",
            run.events.len(),
            started.elapsed().as_millis()
        );
        assert!(
            violations.is_empty(),
            "trial {n}: {}",
            violations
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        );
        // A trial is short, and on a loaded machine the fault may miss one altogether:
        // the faults are counted over all the trials (below), not per trial.
        retried_and_told += retried_completions(&run);
        given_back += claims_given_back(&run);
    }
    println!(
        "F6 lost replies ({}, PostgreSQL {}): {} trials in {} ms, {} replies lost, {} of {} \
         operations unknown, {} completions retried with their fence and told the state, {} \
         lost claims given back to their repeat",
        backend_name(),
        major_version(&direct).await,
        tally.trials,
        started.elapsed().as_millis(),
        tally.faults,
        tally.indeterminate,
        tally.operations,
        retried_and_told,
        given_back
    );
    assert!(
        tally.faults > 0 && tally.indeterminate > 0,
        "{} replies lost in {} trials",
        tally.faults,
        tally.trials
    );
    assert!(
        retried_and_told > 0,
        "no completion whose reply was lost was completed again"
    );
    assert!(
        given_back > 0,
        "no claim whose reply was lost was given back to its repeat"
    );
    tally.close(&server, "").await;
    drop((direct, ledger_direct));
    drop_databases(name).await;
}

fn count(run: &Run, which: impl Fn(&Event) -> bool) -> usize {
    run.events.iter().filter(|e| which(e)).count()
}

/// Claims acknowledged right after a begin of the same task and key whose reply was lost:
/// the repeat with the attempt's claim token. The proxy loses replies only after the
/// server committed, so each is the lost claim given back.
fn claims_given_back(run: &Run) -> usize {
    run.events
        .windows(2)
        .filter(|pair| {
            matches!(pair[0].op, Op::Begin | Op::BeginRepeat)
                && pair[1].op == Op::BeginRepeat
                && pair[0].process == pair[1].process
                && pair[0].key == pair[1].key
                && pair[0].is_indeterminate()
                && matches!(pair[1].outcome, Outcome::Claimed { .. })
        })
        .count()
}

/// Completions acknowledged right after a completion of the same task, key and fence whose
/// reply was lost.
fn retried_completions(run: &Run) -> usize {
    run.events
        .windows(2)
        .filter(|pair| match (&pair[0].op, &pair[1].op) {
            (Op::Complete { fence: a, .. }, Op::Complete { fence: b, .. }) => {
                a == b
                    && pair[0].process == pair[1].process
                    && pair[0].is_indeterminate()
                    && matches!(pair[1].outcome, Outcome::Completed { .. })
            }
            _ => false,
        })
        .count()
}
