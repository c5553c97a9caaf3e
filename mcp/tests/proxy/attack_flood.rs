//! A flood of waiting duplicates. A duplicate of a call running in another proxy waits for
//! its result inside `idem_begin(..., wait)` on a connection of the proxy's pool; one of a
//! call running in the same proxy joins that holder and waits in memory. A crowd of them
//! must not hold every connection, starve the running call's heartbeat until a duplicate
//! takes the call over (a second effect), or hold another principal's calls, and both kinds
//! of wait count against the same caps (docs/mcp.md, "Limits"). The tests that are about
//! the caps run once with each kind of wait (`Waits`).
//!
//! Each proxy here names its sessions with an `application_name` of its own, so that the
//! duplicates it has waiting are counted in `pg_stat_activity` apart from other tests';
//! a joined wait is counted by the proxy's own gate (its log, `HttpProxy::waiting`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use pg_idempotency_mcp::answer::code;
use rmcp::model::{CallToolResult, ErrorData};
use serde_json::{json, Value};

/// A proxy configuration: the database under test with `pool_size` connections, its
/// sessions named `app`, then `rest`.
fn config_named(
    dir: &std::path::Path,
    pool_size: usize,
    app: &str,
    rest: &str,
) -> std::path::PathBuf {
    let path = dir.join(format!("proxy-{app}.toml"));
    let url = format!("{} application_name={app}", pg_idempotency_tests::dsn());
    let text = format!(
        "[database]\nurl = {}\npool_size = {pool_size}\n\n{rest}",
        toml_str(&url)
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The two tenants' bearer tokens (the front refuses tokens under 16 bytes).
const TOKEN_A: &str = "tenant-a-secret-0123456789";
const TOKEN_B: &str = "tenant-b-secret-0123456789";

/// Two bearer tokens, one per tenant, and the counting server behind.
fn two_tenants(c: &Counting, name: &str, tool: &str) -> String {
    format!(
        "[front]\nclients = [{{ token = \"{TOKEN_A}\", principal = \"tenant-a\" }}, {{ token = \"{TOKEN_B}\", principal = \"tenant-b\" }}]\n\n{}\n{tool}",
        c.upstream_stdio(name)
    )
}

async fn tenant(proxy: &HttpProxy, token: &str) -> Client {
    http_client(&proxy.url, &[("authorization", &format!("Bearer {token}"))]).await
}

async fn database() -> tokio_postgres::Client {
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db
}

/// The proxy's sessions that wait inside `idem_begin` now: the extension's wait event, or
/// the PL/pgSQL variant's pg_sleep; through a PL/Proxy proxy (whose session waits for its
/// partition's answer, with no wait event of its own), an `idem_begin` active for over a
/// second, which a begin that does not wait never is but on a machine stalled that long.
async fn waiting(db: &tokio_postgres::Client, app: &str) -> i64 {
    // Unnamed (query_typed): the suite runs through a pooler in transaction mode too.
    db.query_typed(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
         AND state = 'active' AND query LIKE '%idem_begin%' \
         AND (wait_event IN ('Extension', 'PgSleep') \
              OR ($2 AND clock_timestamp() - query_start > interval '1 second'))",
        &[
            (&app, tokio_postgres::types::Type::TEXT),
            (&through_plproxy(), tokio_postgres::types::Type::BOOL),
        ],
    )
    .await
    .unwrap()[0]
        .get(0)
}

fn through_plproxy() -> bool {
    std::env::var("PGIDEM_THROUGH_PROXY").as_deref() == Ok("1")
}

/// Where the duplicates of a running call wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Waits {
    /// Sent to the proxy whose holder runs the call: joined to that holder, in memory.
    Joined,
    /// Sent to another proxy over the same database: inside `idem_begin`, on a connection
    /// of that proxy's pool.
    InDatabase,
}

/// How many duplicates `proxy` has waiting, of the kind `how`: joined ones as its gate
/// counts them, the others as `pg_stat_activity` shows them (its sessions named `app`).
async fn waits(how: Waits, proxy: &HttpProxy, db: &tokio_postgres::Client, app: &str) -> i64 {
    match how {
        Waits::Joined => *proxy.waiting.borrow() as i64,
        Waits::InDatabase => waiting(db, app).await,
    }
}

/// The proxy that holds the running calls: `proxy` itself when the duplicates join their
/// holder, else another proxy over the same database with the same settings (its sessions
/// named `app`-holder).
async fn holder_proxy(
    how: Waits,
    c: &Counting,
    pool_size: usize,
    app: &str,
    rest: &str,
) -> Option<HttpProxy> {
    match how {
        Waits::Joined => None,
        Waits::InDatabase => {
            let config = config_named(&c.dir, pool_size, &format!("{app}-holder"), rest);
            Some(HttpProxy::start(&config, &c.env()).await)
        }
    }
}

/// The record's state, attempt and lease end (seconds since the epoch).
async fn record(db: &tokio_postgres::Client, scope: &str, key: &str) -> Option<(String, i32, f64)> {
    db.query_typed(
        "SELECT state::text, attempt, coalesce(extract(epoch FROM lease_until)::float8, 0) FROM idem_lookup($1, $2)",
        &[(&scope, tokio_postgres::types::Type::TEXT), (&key, tokio_postgres::types::Type::TEXT)],
    )
    .await
    .unwrap()
    .first()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

fn effects_of(c: &Counting, message_id: &str) -> usize {
    c.effects()
        .iter()
        .filter(|e| e["kind"] == "send_email" && e["message_id"] == message_id)
        .count()
}

fn held_call(message_id: &str) -> Value {
    json!({"to": "a@x", "subject": "flood", "message_id": message_id, "hold": true})
}

/// What the flood's duplicates were answered.
#[derive(Default)]
struct Answers {
    replays: Vec<CallToolResult>,
    /// The holder's result passed on before it was recorded: what a duplicate joined to
    /// its holder in the proxy is answered when a cap cut its wait as the tool returned.
    passed_on: Vec<CallToolResult>,
    in_progress: usize,
    /// Anything else: an error other than in_progress. (A duplicate that ran the call
    /// again would have a result of its own, and a second effect: both are checked.)
    unexpected: Vec<String>,
}

/// `n` duplicates of the held call, at once and again as soon as each is answered, until
/// `stop`.
fn flood(
    clients: &[Arc<Client>],
    n: usize,
    key: &str,
    args: &Value,
    stop: &Arc<AtomicBool>,
    answers: &Arc<Mutex<Answers>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|i| {
            let client = clients[i % clients.len()].clone();
            let (key, args) = (key.to_string(), args.clone());
            let (stop, answers) = (stop.clone(), answers.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let answer = call(&client, "send_email", args.clone(), key_meta(&key)).await;
                    {
                        let mut a = answers.lock().unwrap();
                        match answer {
                            Ok(r) if mark(&r)["replayed"] == true => a.replays.push(r),
                            Ok(r) => a.passed_on.push(r),
                            Err(e) if e.code.0 == code::IN_PROGRESS => a.in_progress += 1,
                            other => a.unexpected.push(format!("{other:?}")),
                        }
                    }
                    // Paces the crowd (its retries come back at once, not after
                    // retryAfterMs): it stays a crowd without spinning the machine's cores.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        })
        .collect()
}

fn in_progress_detail(e: &ErrorData) -> String {
    e.data.as_ref().map_or(String::new(), |d| {
        d["detail"].as_str().unwrap_or_default().to_string()
    })
}

/// More duplicates of one principal than the pool has connections wait while a call runs
/// past several lease lengths in the proxy: its heartbeat goes on (a pool of its own), so
/// it is never taken over. One effect, attempt 1, and the duplicates get the replay or
/// in_progress. Another principal's unrelated call completes while the flood is on.
/// The crowd duplicates the running call itself (joined to its holder).
#[tokio::test]
async fn a_flood_of_joined_duplicates_never_takes_the_running_call_over() {
    flood_never_takes_over(Waits::Joined).await;
}

/// The same, the crowd duplicating a call that runs in another proxy: it waits inside
/// `idem_begin` on the connections of the pool of the proxy whose call runs meanwhile.
#[tokio::test]
async fn a_flood_of_duplicates_waiting_in_the_database_never_takes_the_running_call_over() {
    flood_never_takes_over(Waits::InDatabase).await;
}

async fn flood_never_takes_over(how: Waits) {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, &format!("flood-{how:?}"));
    let name = pg_idempotency_tests::scope("mail");
    let app = pg_idempotency_tests::scope("flood");
    // A short lease, so that the call runs past several while the flood is on; a long
    // wait, so that an admitted duplicate waits for as long as the flood lasts.
    let rest = two_tenants(
        &c,
        &name,
        "[tools.send_email]\nlease = \"3s\"\nwait = \"60s\"\n",
    );
    let config = config_named(&c.dir, 4, &app, &rest);
    let mut proxy = HttpProxy::start(&config, &c.env()).await;
    let holder = holder_proxy(how, &c, 4, &app, &rest).await;
    let db = database().await;
    let (key, args) = ("flood-1", held_call("flood-1"));
    let scope = pg_idempotency_mcp::scope::scope_of(&name, "send_email", "tenant-a");
    let a = tenant(&proxy, TOKEN_A).await;
    let first = tokio::spawn({
        let args = args.clone();
        async move { call(&a, "send_email", args, key_meta(key)).await }
    });
    c.held(key).await;
    let (_, attempt, claimed_until) = record(&db, &scope, key).await.expect("the call is claimed");
    assert_eq!(attempt, 1);
    // What the crowd duplicates: the running call, or one running in the other proxy.
    let (crowd_key, crowd_first) = match &holder {
        None => (key, None),
        Some(h) => {
            let there = tenant(h, TOKEN_A).await;
            let other = tokio::spawn(async move {
                call(
                    &there,
                    "send_email",
                    held_call("flood-2"),
                    key_meta("flood-2"),
                )
                .await
            });
            c.held("flood-2").await;
            ("flood-2", Some(other))
        }
    };
    let crowd_args = held_call(crowd_key);
    // Twelve duplicates at once (the pool has four connections), over three sessions.
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(Arc::new(tenant(&proxy, TOKEN_A).await));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(Mutex::new(Answers::default()));
    let crowd = flood(&sessions, 12, crowd_key, &crowd_args, &stop, &answers);
    // The flood is on once duplicates wait (as many as the pool less its reserve).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while waits(how, &proxy, &db, &app).await < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no duplicate ever waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another principal's unrelated call, during the flood.
    let b = tenant(&proxy, TOKEN_B).await;
    let other = tokio::spawn(async move {
        let r = call(
            &b,
            "send_email",
            json!({"to": "b@x", "subject": "unrelated", "message_id": "other-1"}),
            None,
        )
        .await;
        (b, r)
    });
    // The call runs on past three lease lengths, its lease extended every time, never
    // taken over; the other principal's call is answered meanwhile.
    let lease = 3.0;
    let deadline = tokio::time::Instant::now() + PATIENCE * 2;
    loop {
        let (state, attempt, until) = record(&db, &scope, key).await.expect("the record stays");
        assert_eq!(attempt, 1, "the running call was taken over by a duplicate");
        assert_eq!(state, "in_progress");
        assert_eq!(effects_of(&c, key), 1, "a duplicate ran the call again");
        if until >= claimed_until + 3.0 * lease && other.is_finished() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease was not extended past three lease lengths (until {until}, claimed until {claimed_until}), or the other principal's call was never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (b, theirs) = other.await.unwrap();
    let theirs = theirs.expect("the other principal's call completes during the flood");
    assert_eq!(mark(&theirs)["replayed"], false);
    assert_eq!(effects_of(&c, "other-1"), 1);
    // The call answers; the crowd then gets its replay.
    c.release();
    let first = first.await.unwrap().expect("the running call completes");
    assert_eq!(mark(&first)["replayed"], false);
    let crowd_first = match crowd_first {
        None => first.clone(),
        Some(other) => other
            .await
            .unwrap()
            .expect("the other proxy's call completes"),
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while answers.lock().unwrap().replays.len() < 12 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the duplicates never got the replay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for d in crowd {
        d.await.unwrap();
    }
    let answers = std::mem::take(&mut *answers.lock().unwrap());
    eprintln!(
        "the crowd ({how:?}): {} replays, {} results passed on, {} in_progress",
        answers.replays.len(),
        answers.passed_on.len(),
        answers.in_progress
    );
    assert!(answers.unexpected.is_empty(), "{:?}", answers.unexpected);
    assert!(
        answers.in_progress > 0,
        "the duplicates beyond the cap were answered in_progress at once"
    );
    for r in answers.replays.iter().chain(&answers.passed_on) {
        assert_eq!(unmarked(r), unmarked(&crowd_first));
    }
    // A duplicate never runs the call: a result a joined holder has not recorded yet is
    // handed on as a replay too.
    assert!(answers.passed_on.is_empty(), "{:?}", answers.passed_on);
    assert_eq!((effects_of(&c, key), effects_of(&c, crowd_key)), (1, 1));
    let (state, attempt, _) = record(&db, &scope, key).await.unwrap();
    assert_eq!((state.as_str(), attempt), ("succeeded", 1));
    b.cancel().await.unwrap();
    proxy.kill().await;
    if let Some(mut h) = holder {
        h.kill().await;
    }
}

/// A principal's duplicates beyond `max_waiting_per_principal` (4) do not wait: the fifth
/// is answered in_progress at once, its detail naming the setting; another principal's
/// duplicates still wait until all principals' waits reach the pool less its reserve (6),
/// where the next is answered at once too, naming `reserved_connections`; every one that
/// waited gets the replay. The duplicates join their holder in the proxy.
#[tokio::test]
async fn a_joined_duplicate_over_a_cap_is_answered_at_once() {
    over_a_cap(Waits::Joined).await;
}

/// The same, the calls running in another proxy: the duplicates wait inside `idem_begin`.
#[tokio::test]
async fn a_duplicate_over_a_cap_is_answered_at_once() {
    over_a_cap(Waits::InDatabase).await;
}

async fn over_a_cap(how: Waits) {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, &format!("flood-cap-{how:?}"));
    let name = pg_idempotency_tests::scope("mail");
    let app = pg_idempotency_tests::scope("cap");
    let rest = two_tenants(&c, &name, "[tools.send_email]\nwait = \"60s\"\n");
    // Eight connections: six for waiting duplicates (two reserved), four per principal.
    let config = config_named(&c.dir, 8, &app, &rest);
    let mut proxy = HttpProxy::start(&config, &c.env()).await;
    let holder = holder_proxy(how, &c, 8, &app, &rest).await;
    let db = database().await;
    let a = Arc::new(tenant(&proxy, TOKEN_A).await);
    let b = Arc::new(tenant(&proxy, TOKEN_B).await);
    // Where the first calls run: this proxy, or the other one.
    let (held_a, held_b) = match &holder {
        None => (a.clone(), b.clone()),
        Some(h) => (
            Arc::new(tenant(h, TOKEN_A).await),
            Arc::new(tenant(h, TOKEN_B).await),
        ),
    };
    let spawn_call = |client: &Arc<Client>, id: &str| {
        let (client, id) = (client.clone(), id.to_string());
        tokio::spawn(
            async move { call(&client, "send_email", held_call(&id), key_meta(&id)).await },
        )
    };
    let first_a = spawn_call(&held_a, "cap-a");
    c.held("cap-a").await;
    let first_b = spawn_call(&held_b, "cap-b");
    c.held("cap-b").await;
    // Four of A's duplicates wait.
    let dups: Vec<_> = (0..4).map(|_| spawn_call(&a, "cap-a")).collect();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while waits(how, &proxy, &db, &app).await < 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "four duplicates never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A fifth is answered at once.
    let fifth = spawn_call(&a, "cap-a");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !fifth.is_finished() {
        assert!(
            waits(how, &proxy, &db, &app).await <= 4,
            "a fifth duplicate of one principal waits"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fifth duplicate was never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if how == Waits::Joined {
        // Joined to their holder in this proxy, they hold no connection while they wait.
        assert_eq!(
            waiting(&db, &app).await,
            0,
            "a duplicate of a call running in its own proxy waits in the database"
        );
    }
    let busy = fifth.await.unwrap().unwrap_err();
    assert_eq!(busy.code.0, code::IN_PROGRESS, "{busy:?}");
    let data = busy.data.clone().unwrap();
    assert_eq!(data["kind"], "in_progress");
    assert!(data["retryAfterMs"].as_u64().is_some(), "{data}");
    assert!(
        in_progress_detail(&busy).contains("limits.max_waiting_per_principal"),
        "{data}"
    );
    // The other principal's duplicates wait (a fifth and a sixth waiting).
    let mut dups_b = Vec::new();
    for n in 5..=6 {
        dups_b.push(spawn_call(&b, "cap-b"));
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while waits(how, &proxy, &db, &app).await < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the other principal's duplicate never waited"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A seventh, the other principal's third, reaches the cap of all principals (the
    // pool less its reserve): answered at once.
    let seventh = spawn_call(&b, "cap-b");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !seventh.is_finished() {
        assert!(
            waits(how, &proxy, &db, &app).await <= 6,
            "a seventh duplicate waits"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the seventh duplicate was never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let busy = seventh.await.unwrap().unwrap_err();
    assert_eq!(busy.code.0, code::IN_PROGRESS, "{busy:?}");
    assert!(
        in_progress_detail(&busy).contains("limits.reserved_connections"),
        "{busy:?}"
    );
    c.release();
    let (first_a, first_b) = (
        first_a.await.unwrap().unwrap(),
        first_b.await.unwrap().unwrap(),
    );
    for d in dups {
        let r = d.await.unwrap().unwrap();
        assert_eq!(mark(&r)["replayed"], true);
        assert_eq!(unmarked(&r), unmarked(&first_a));
    }
    for d in dups_b {
        let r = d.await.unwrap().unwrap();
        assert_eq!(mark(&r)["replayed"], true);
        assert_eq!(unmarked(&r), unmarked(&first_b));
    }
    let after = call(&a, "send_email", held_call("cap-a"), key_meta("cap-a"))
        .await
        .unwrap();
    assert_eq!(mark(&after)["replayed"], true);
    assert_eq!((effects_of(&c, "cap-a"), effects_of(&c, "cap-b")), (1, 1));
    proxy.kill().await;
    if let Some(mut h) = holder {
        h.kill().await;
    }
}

/// A call that finds no free connection in the pool within `pool_wait_timeout` is answered
/// -32075 store_unavailable with a hint, not left hanging, and is not sent upstream. The
/// connection is held by a duplicate waiting inside `idem_begin` for a call that runs in
/// another proxy (a duplicate joined to its holder in the same proxy holds none).
#[tokio::test]
async fn a_pool_with_no_free_connection_answers_store_unavailable() {
    let Some((parts, python)) = Parts::python_or_skip() else {
        return;
    };
    let c = Counting::new(&parts, &python, "flood-pool");
    let name = pg_idempotency_tests::scope("mail");
    let app = pg_idempotency_tests::scope("pool");
    let rest = two_tenants(&c, &name, "[tools.send_email]\nwait = \"60s\"\n");
    // One connection, and no reserve on a pool of one: a waiting duplicate holds it.
    let config = config_named(&c.dir, 1, &app, &rest);
    let mut proxy = HttpProxy::start(&config, &c.env()).await;
    let mut holder = holder_proxy(Waits::InDatabase, &c, 1, &app, &rest)
        .await
        .expect("another proxy");
    let db = database().await;
    let a = Arc::new(tenant(&proxy, TOKEN_A).await);
    let b = tenant(&proxy, TOKEN_B).await;
    let first = {
        let a = tenant(&holder, TOKEN_A).await;
        tokio::spawn(async move {
            call(&a, "send_email", held_call("pool-a"), key_meta("pool-a")).await
        })
    };
    c.held("pool-a").await;
    let dup = {
        let a = a.clone();
        tokio::spawn(async move {
            call(&a, "send_email", held_call("pool-a"), key_meta("pool-a")).await
        })
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while waiting(&db, &app).await < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the duplicate never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Not a latency bound: a guard against a hang, far above the 5 s pool_wait_timeout.
    let answer = tokio::time::timeout(
        PATIENCE,
        call(
            &b,
            "send_email",
            json!({"to": "b@x", "subject": "s", "message_id": "pool-b"}),
            None,
        ),
    )
    .await
    .expect("the call was answered, not left waiting for a connection");
    let e = answer.expect_err("no connection was free: store_unavailable");
    assert_eq!(e.code.0, code::STORE_UNAVAILABLE, "{e:?}");
    let data = e.data.clone().unwrap();
    assert_eq!(data["kind"], "store_unavailable");
    assert!(
        data["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("limits.pool_wait_timeout"),
        "{data}"
    );
    assert!(
        data["hint"].as_str().is_some_and(|h| !h.is_empty()),
        "{data}"
    );
    assert_eq!(effects_of(&c, "pool-b"), 0, "the call was not sent");
    c.release();
    let first = first.await.unwrap().unwrap();
    let replay = dup.await.unwrap().unwrap();
    assert_eq!(unmarked(&replay), unmarked(&first));
    assert_eq!(effects_of(&c, "pool-a"), 1);
    b.cancel().await.unwrap();
    proxy.kill().await;
    holder.kill().await;
}
