//! Exactly-once tools (`ExactlyOnce::dispatch_in`): the claim, the tool's outbox row and
//! the completion commit or roll back together, on whichever backend `PGIDEM_DSN`'s
//! database has installed. Concurrent sessions are ordered by what the server shows
//! (pg_stat_activity), never by a sleep. Each session is known there by an
//! `application_name` of its own, not by its pid: through a pooler in transaction mode
//! (the test command runs this suite through PgBouncer) a connection has no server session
//! of its own outside a transaction, and PgBouncer sets the name on the one it lends.
//! The tests' own statements outside a transaction are unnamed (`query_typed`) for the
//! same reason.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, IsolationLevel, NoTls};

use crate::common::*;
use pg_idempotency_client::*;

/// How long a test waits for something it is sure will happen before calling it a failure.
const BOUND: Duration = Duration::from_secs(10);

/// How the test steers the tool: it is told once the tool wrote its row, and a held tool
/// returns only when the test lets it go on.
#[derive(Clone, Default)]
struct Steer {
    wrote: Arc<Notify>,
    hold: Option<Arc<Notify>>,
}

impl Steer {
    fn held() -> Steer {
        Steer {
            hold: Some(Arc::default()),
            ..Steer::default()
        }
    }
    async fn tool_wrote(&self) {
        tokio::time::timeout(BOUND, self.wrote.notified())
            .await
            .expect("the tool never wrote its row");
    }
    fn go_on(&self) {
        self.hold.as_ref().expect("a held Steer").notify_one();
    }
}

/// A send_email tool whose email is a row in `table`; an input with `"fail": "tool"` writes
/// its row and then fails, one with `"fail": "database"` writes it and then runs a
/// statement that fails (which aborts what the transaction did since its last savepoint).
fn send_email(table: &str, steer: &Steer) -> Arc<dyn TxTool> {
    let insert = format!("INSERT INTO \"{table}\" (call) VALUES ($1) RETURNING id");
    let steer = steer.clone();
    tx_tool_fn(move |tx, input| {
        let (insert, steer) = (insert.clone(), steer.clone());
        Box::pin(async move {
            let row = tx.query_one(&insert, &[&input["id"].as_str()]).await?;
            steer.wrote.notify_one();
            if let Some(hold) = &steer.hold {
                hold.notified().await;
            }
            if input["fail"] == "database" {
                tx.execute("SELECT 1 / 0", &[]).await?;
            }
            if input["fail"] == "tool" {
                return Err(ToolError {
                    response: Some(json!({"error": "mailbox full"})),
                    ..ToolError::new("mailbox full")
                });
            }
            Ok(json!({"email_id": row.get::<_, i32>(0)}))
        })
    })
}

/// A connection of its own, with the `application_name` it is known by in pg_stat_activity.
async fn connect() -> (Client, String) {
    let name = unique("session");
    let mut config: tokio_postgres::Config = dsn().parse().expect("PGIDEM_DSN");
    config.application_name(&name);
    let (client, conn) = config.connect(NoTls).await.expect("PGIDEM_DSN's database");
    tokio::spawn(conn);
    (client, name)
}

/// The count `sql` answers, its one parameter a text.
async fn count(client: &Client, sql: &str, param: &str) -> i64 {
    client
        .query_typed(sql, &[(&param, Type::TEXT)])
        .await
        .expect("a count")[0]
        .get(0)
}

/// One tool on an outbox table of its own, and a connection that looks from outside.
struct Fixture {
    tools: Arc<ExactlyOnce>,
    scope: String,
    table: String,
    observer: Client,
}

impl Fixture {
    async fn new(idem: Idempotent, steer: &Steer) -> Fixture {
        let (observer, _) = connect().await;
        let (scope, table) = (unique("send_email"), unique("outbox"));
        observer
            .batch_execute(&format!(
                "CREATE TABLE \"{table}\" (id serial PRIMARY KEY, call text)"
            ))
            .await
            .unwrap();
        let tools = ExactlyOnce::new().statement_mode(statement_mode());
        tools
            .register(TxToolSpec::new(&scope, send_email(&table, steer)).idempotent(idem))
            .unwrap();
        Fixture {
            tools: Arc::new(tools),
            scope,
            table,
            observer,
        }
    }

    /// The committed outbox rows of call `id`.
    async fn rows(&self, id: &str) -> i64 {
        count(
            &self.observer,
            &format!("SELECT count(*) FROM \"{}\" WHERE call = $1", self.table),
            id,
        )
        .await
    }

    /// The committed record of the call with `input` (HashInput: the key is its hash).
    async fn record(&self, input: &Value) -> Option<Record> {
        let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(input).unwrap());
        pg_store(&self.observer)
            .lookup(&self.scope, &key)
            .await
            .unwrap()
    }

    /// A call in a transaction of its own, committed unless it failed.
    async fn call_committed(&self, input: &Value) -> Result<Dispatched> {
        let (mut client, _) = connect().await;
        let tx = client.transaction().await.unwrap();
        let answer = self
            .tools
            .dispatch_in(&tx, &self.scope, input.clone())
            .await;
        tx.commit().await.unwrap();
        answer
    }

    /// Waits until session `name` is seen waiting on a lock (the first call's row).
    async fn waiting_on_a_lock(&self, name: &str) {
        let seen = async {
            loop {
                let n = count(
                    &self.observer,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    name,
                )
                .await;
                if n == 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(BOUND, seen)
            .await
            .expect("the duplicate was never seen waiting on a lock");
    }

    /// Waits until session `name` has ended.
    async fn ended(&self, name: &str) {
        let gone = async {
            loop {
                let n = count(
                    &self.observer,
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    name,
                )
                .await;
                if n == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(BOUND, gone)
            .await
            .expect("the terminated session never ended");
    }
}

fn ran(d: Result<Dispatched>) -> Value {
    match d {
        Ok(Dispatched::Ran(v)) => v,
        other => panic!("expected the tool to run, got {other:?}"),
    }
}

fn replayed(d: Result<Dispatched>) -> Value {
    match d {
        Ok(Dispatched::Replayed(v)) => v,
        other => panic!("expected a replay, got {other:?}"),
    }
}

/// Committed: one row, a completed record with its result; a repeat (in the same
/// transaction, and after the commit) replays it and writes nothing.
#[tokio::test]
async fn a_committed_call_has_one_row_and_its_record_and_a_repeat_replays() {
    let f = Fixture::new(Idempotent::new(), &Steer::default()).await;
    let input = json!({"id": "c1", "to": "ann@example.com"});
    let (mut client, _) = connect().await;
    let tx = client.transaction().await.unwrap();
    let result = ran(f.tools.dispatch_in(&tx, &f.scope, input.clone()).await);
    assert_eq!(
        replayed(f.tools.dispatch_in(&tx, &f.scope, input.clone()).await),
        result,
        "a repeat in the same transaction"
    );
    // Nothing is seen from outside before the commit: not the row, not the record.
    assert_eq!(f.rows("c1").await, 0);
    assert!(f.record(&input).await.is_none());
    tx.commit().await.unwrap();

    assert_eq!(f.rows("c1").await, 1);
    let rec = f.record(&input).await.expect("the call's record");
    assert_eq!(rec.state, State::Succeeded);
    assert_eq!(rec.response, Some(result.clone()));
    assert_eq!(replayed(f.call_committed(&input).await), result);
    assert_eq!(f.rows("c1").await, 1);
}

/// Rolled back: no row, no record; a retry runs the tool.
#[tokio::test]
async fn a_rolled_back_call_leaves_nothing_and_a_retry_runs() {
    let f = Fixture::new(Idempotent::new(), &Steer::default()).await;
    let input = json!({"id": "r1"});
    let (mut client, _) = connect().await;
    let tx = client.transaction().await.unwrap();
    ran(f.tools.dispatch_in(&tx, &f.scope, input.clone()).await);
    tx.rollback().await.unwrap();

    assert_eq!(f.rows("r1").await, 0);
    assert!(f.record(&input).await.is_none());
    ran(f.call_committed(&input).await);
    assert_eq!(f.rows("r1").await, 1);
}

/// A failed tool's row is undone whatever the caller does next; its transaction stays
/// usable, a failed statement of the tool's included. Not cached, nothing is remembered and
/// a retry runs; cached, the failure is remembered once the caller commits, and a repeat
/// replays it.
#[tokio::test]
async fn a_failed_tool_writes_nothing_and_its_failure_is_remembered_only_when_cached() {
    for (cache, fail) in [
        (false, "tool"),
        (true, "tool"),
        (false, "database"),
        (true, "database"),
    ] {
        let f = Fixture::new(Idempotent::new().cache_failures(cache), &Steer::default()).await;
        let input = json!({"id": "f1", "fail": fail});
        let failure = match fail {
            "tool" => json!({"error": "mailbox full"}),
            _ => json!({"error": "division by zero", "sqlstate": "22012"}),
        };
        let (mut client, _) = connect().await;
        let tx = client.transaction().await.unwrap();
        let e = f
            .tools
            .dispatch_in(&tx, &f.scope, input.clone())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::ToolFailed, "{e:?}");
        assert!(!e.replayed());
        assert_eq!(e.response(), Some(&failure));
        // The caller's own write in the same transaction survives the tool's failure.
        tx.execute(
            &format!("INSERT INTO \"{}\" (call) VALUES ('caller')", f.table),
            &[],
        )
        .await
        .expect("the transaction is usable after a failed tool");
        tx.commit().await.unwrap();

        assert_eq!(f.rows("f1").await, 0, "cache_failures {cache}, {fail}");
        assert_eq!(f.rows("caller").await, 1, "cache_failures {cache}, {fail}");
        let rec = f.record(&input).await;
        if cache {
            let rec = rec.expect("the cached failure's record");
            assert_eq!(rec.state, State::Failed);
            let e = f.call_committed(&input).await.unwrap_err();
            assert!(e.replayed(), "{e:?}");
            assert_eq!(e.response(), Some(&failure));
        } else {
            assert!(rec.is_none(), "{rec:?}");
            let e = f.call_committed(&input).await.unwrap_err();
            assert!(!e.replayed(), "a retry runs the tool again: {e:?}");
        }
        assert_eq!(f.rows("f1").await, 0);
    }
}

/// A refusal of the store (here a mismatch) leaves the caller's transaction as it was
/// before the call, and usable.
#[tokio::test]
async fn a_refused_call_leaves_the_transaction_usable() {
    let f = Fixture::new(
        Idempotent::new()
            .key_supplier(|input| input["id"].as_str().map(str::to_string))
            .fingerprint(Fingerprint::WholeInput),
        &Steer::default(),
    )
    .await;
    let (mut client, _) = connect().await;
    let tx = client.transaction().await.unwrap();
    ran(f
        .tools
        .dispatch_in(&tx, &f.scope, json!({"id": "m1", "body": "a"}))
        .await);
    let e = f
        .tools
        .dispatch_in(&tx, &f.scope, json!({"id": "m1", "body": "b"}))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch, "{e:?}");
    tx.commit()
        .await
        .expect("the transaction is usable after a refusal");
    assert_eq!(f.rows("m1").await, 1);
}

enum FirstEnds {
    Commit,
    Rollback,
}

/// Under READ COMMITTED, a duplicate waits on the first call's uncommitted row; it replays
/// the result once the first transaction commits, or claims and runs the call itself if it
/// rolled back. One row either way.
async fn a_duplicate_waits_for_the_first_transaction(first_ends: FirstEnds) {
    let f = Fixture::new(Idempotent::new(), &Steer::default()).await;
    let input = json!({"id": "d1"});
    let (mut first, _) = connect().await;
    let tx = first.transaction().await.unwrap();
    let result = ran(f.tools.dispatch_in(&tx, &f.scope, input.clone()).await);

    let (mut second, name) = connect().await;
    let duplicate = {
        let (tools, scope, input) = (f.tools.clone(), f.scope.clone(), input.clone());
        tokio::spawn(async move {
            let tx = second.transaction().await.unwrap();
            let answer = tools.dispatch_in(&tx, &scope, input).await;
            tx.commit().await.unwrap();
            answer
        })
    };
    f.waiting_on_a_lock(&name).await;
    match first_ends {
        FirstEnds::Commit => {
            tx.commit().await.unwrap();
            assert_eq!(replayed(duplicate.await.unwrap()), result);
        }
        FirstEnds::Rollback => {
            tx.rollback().await.unwrap();
            ran(duplicate.await.unwrap());
        }
    }
    assert_eq!(f.rows("d1").await, 1);
    assert_eq!(
        f.record(&input).await.map(|r| r.state),
        Some(State::Succeeded)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_and_replays_after_the_first_commits() {
    a_duplicate_waits_for_the_first_transaction(FirstEnds::Commit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_waits_and_claims_after_the_first_rolls_back() {
    a_duplicate_waits_for_the_first_transaction(FirstEnds::Rollback).await;
}

/// Under REPEATABLE READ the waiting duplicate cannot see the first call's record once it
/// commits: it fails with Contention (40001), and its retry, a new transaction, replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_repeatable_read_a_duplicate_fails_with_contention_and_its_retry_replays() {
    let f = Fixture::new(Idempotent::new(), &Steer::default()).await;
    let input = json!({"id": "rr1"});
    let (mut first, _) = connect().await;
    let tx = first.transaction().await.unwrap();
    let result = ran(f.tools.dispatch_in(&tx, &f.scope, input.clone()).await);

    let (mut second, name) = connect().await;
    let duplicate = {
        let (tools, scope, input) = (f.tools.clone(), f.scope.clone(), input.clone());
        tokio::spawn(async move {
            let answer = {
                let tx = second
                    .build_transaction()
                    .isolation_level(IsolationLevel::RepeatableRead)
                    .start()
                    .await
                    .unwrap();
                tools.dispatch_in(&tx, &scope, input.clone()).await
                // Dropped: rolled back.
            };
            let retry = {
                let tx = second
                    .build_transaction()
                    .isolation_level(IsolationLevel::RepeatableRead)
                    .start()
                    .await
                    .unwrap();
                let retry = tools.dispatch_in(&tx, &scope, input).await;
                tx.commit().await.unwrap();
                retry
            };
            (answer, retry)
        })
    };
    f.waiting_on_a_lock(&name).await;
    tx.commit().await.unwrap();
    let (answer, retry) = duplicate.await.unwrap();
    let e = answer.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Contention, "{e:?}");
    assert_eq!(replayed(retry), result);
    assert_eq!(f.rows("rr1").await, 1);
}

/// The session is terminated (`pg_terminate_backend`) while the tool is inside the
/// transaction, its row written: nothing is left, outbox rows equal completed records, and
/// a retry runs the tool once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_terminated_mid_call_leaves_nothing_and_a_retry_runs_once() {
    let steer = Steer::held();
    let f = Fixture::new(Idempotent::new(), &steer).await;
    let input = json!({"id": "t1"});
    let (mut client, name) = connect().await;
    let call = {
        let (tools, scope, input) = (f.tools.clone(), f.scope.clone(), input.clone());
        tokio::spawn(async move {
            let tx = client.transaction().await.unwrap();
            let answer = tools.dispatch_in(&tx, &scope, input).await;
            let committed = tx.commit().await;
            (answer, committed)
        })
    };
    steer.tool_wrote().await;
    // The session's server connection: its own, or the one a pooler lent its transaction.
    let killed = count(
        &f.observer,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
        &name,
    )
    .await;
    assert_eq!(killed, 1, "one session named {name}");
    f.ended(&name).await;
    steer.go_on();
    let (answer, committed) = call.await.unwrap();
    assert!(answer.is_err(), "{answer:?}");
    assert!(
        committed.is_err(),
        "the terminated transaction cannot commit"
    );

    assert_eq!(f.rows("t1").await, 0);
    assert!(f.record(&input).await.is_none());
    steer.go_on();
    ran(f.call_committed(&input).await);
    assert_eq!(f.rows("t1").await, 1);
    assert_eq!(
        f.record(&input).await.map(|r| r.state),
        Some(State::Succeeded)
    );
}

/// A tool's calls get the same key and fingerprint whether the `Dispatcher` or
/// `ExactlyOnce` runs them: a call the dispatcher made replays inside a transaction, and a
/// repeat whose fingerprinted field differs is refused there too.
#[tokio::test]
async fn a_call_made_by_the_dispatcher_replays_in_a_transaction() {
    let idem = Idempotent::new()
        .key_supplier(|input| input["id"].as_str().map(str::to_string))
        .fingerprint(Fingerprint::Fields(vec!["/to".into()]));
    let f = Fixture::new(idem.clone(), &Steer::default()).await;
    let d = Dispatcher::new(Arc::new(pg_store(pool())));
    d.register(
        ToolSpec::new(
            &f.scope,
            tool_fn(|_| async { Ok(json!({"email_id": "by the dispatcher"})) }),
        )
        .idempotent(idem),
    )
    .unwrap();
    let input = json!({"id": "k1", "to": "ann@example.com", "body": "a"});
    d.dispatch(&f.scope, input.clone()).await.unwrap();

    let edited = json!({"id": "k1", "to": "ann@example.com", "body": "b"});
    assert_eq!(
        replayed(f.call_committed(&edited).await),
        json!({"email_id": "by the dispatcher"})
    );
    let elsewhere = json!({"id": "k1", "to": "bob@example.com"});
    let e = f.call_committed(&elsewhere).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch, "{e:?}");
    assert_eq!(f.rows("k1").await, 0);
}

/// Waits until the lease of the call with `input` has lapsed, as its record shows.
async fn lease_lapsed(f: &Fixture, input: &Value) {
    let lapsed = async {
        loop {
            let rec = f.record(input).await.expect("the claim's record");
            let until = rec.lease_until.expect("a claim has a lease");
            match until.duration_since(std::time::SystemTime::now()) {
                Ok(left) => tokio::time::sleep(left + Duration::from_millis(1)).await,
                Err(_) => return,
            }
        }
    };
    tokio::time::timeout(BOUND, lapsed)
        .await
        .expect("the lease never lapsed");
}

/// A claim committed without its completion (a holder outside any transaction that
/// crashed) is taken over inside a transaction once its lease lapses, as `recovered`, and
/// the tool's choice applies: Rerun writes the row once; Refuse writes nothing, and its
/// refusal, committed, is every retry's answer.
#[tokio::test]
async fn a_takeover_of_a_lapsed_claim_follows_the_tools_choice() {
    for choice in [OnUnknownOutcome::Rerun, OnUnknownOutcome::Refuse] {
        let refuse = matches!(choice, OnUnknownOutcome::Refuse);
        let f = Fixture::new(
            Idempotent::new().on_unknown_outcome(choice),
            &Steer::default(),
        )
        .await;
        let input = json!({"id": "l1"});
        let key = pg_idempotency_canon::key_of(&pg_idempotency_canon::hash_value(&input).unwrap());
        let crashed = BeginOptions {
            request: Some(input.clone()),
            lease: Some(Duration::from_millis(300)),
            ..BeginOptions::default()
        };
        let begun = pg_store(&f.observer)
            .begin(&f.scope, &key, &crashed)
            .await
            .unwrap();
        assert!(matches!(begun, Begin::Claimed(_)), "{begun:?}");
        lease_lapsed(&f, &input).await;

        if refuse {
            let e = f.call_committed(&input).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::OutcomeUnknown, "{e:?}");
            assert!(!e.replayed());
            let e = f.call_committed(&input).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::OutcomeUnknown, "{e:?}");
            assert!(e.replayed(), "the refusal was committed: {e:?}");
            assert_eq!(f.rows("l1").await, 0);
        } else {
            ran(f.call_committed(&input).await);
            let rec = f.record(&input).await.expect("the call's record");
            assert_eq!((rec.state, rec.attempt), (State::Succeeded, 2));
            assert_eq!(f.rows("l1").await, 1);
        }
    }
}
