//! The fault proxy against the real server: it forwards to TCP and unix-socket upstreams, and
//! each fault does to a client what it says, observed from the client and from a direct
//! connection to the server (never ordered by sleeping: by polling what the server shows).

use std::time::Duration;

use pg_idempotency_faults::proxy::{Cut, Fault, Proxy, Trigger, Upstream};
use pg_idempotency_tests::{self as suite, until_async, PATIENCE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::{Client, NoTls};

/// A fresh database `pidem_px_<name>` (with the backend under test if `backend`): its DSN.
async fn database(name: &str, backend: bool) -> String {
    let db = format!("pidem_px_{name}");
    tokio::task::spawn_blocking(move || {
        let dsn = suite::fresh_database(&db);
        if backend {
            suite::install(&dsn);
        }
        dsn
    })
    .await
    .unwrap()
}

async fn drop_database(name: &str) {
    let db = format!("pidem_px_{name}");
    tokio::task::spawn_blocking(move || suite::drop_database(&db))
        .await
        .unwrap();
}

async fn connect(dsn: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {dsn}: {e}"));
    tokio::spawn(connection);
    client
}

/// A proxy in front of the server of `dsn`, and `dsn` rewritten to go through it.
async fn proxy_for(dsn: &str) -> (Proxy, String) {
    let proxy = Proxy::start(Upstream::from_dsn(dsn).unwrap())
        .await
        .unwrap();
    let through = proxy.dsn(dsn);
    (proxy, through)
}

/// The error a client sees when its connection is cut: no SQLSTATE, the server never
/// answered with an error.
fn assert_io_error(result: Result<impl std::fmt::Debug, tokio_postgres::Error>, what: &str) {
    let err = result.expect_err(&format!("{what}: the client got an answer"));
    assert!(
        err.code().is_none(),
        "{what}: expected a broken connection, got SQLSTATE {:?}: {err}",
        err.code()
    );
}

/// Backends of the server with this application_name.
async fn backends_named(direct: &Client, app: &str) -> i64 {
    direct
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap()
        .get(0)
}

/// A name no other test or run uses, for application_name.
fn unique(name: &str) -> String {
    suite::scope(name).replace('-', "_")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_both_ways_to_unix_and_tcp_upstreams() {
    let dsn = suite::dsn();
    let mut upstreams = vec![Upstream::from_dsn(&dsn).unwrap()];
    // The private clusters also listen on 127.0.0.1 (scripts/cluster.sh): try TCP too.
    if let Upstream::Unix(path) = &upstreams[0] {
        let port = path.extension().and_then(|p| p.to_str()).unwrap();
        upstreams.push(Upstream::Tcp(format!("127.0.0.1:{port}").parse().unwrap()));
    }
    for upstream in upstreams {
        let unix = matches!(upstream, Upstream::Unix(_));
        let proxy = Proxy::start(upstream.clone()).await.unwrap();
        let client = connect(&proxy.dsn(&dsn)).await;

        let n: i32 = client
            .query_one("SELECT $1::int + 1", &[&41i32])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 42, "{upstream:?}");
        // A reply far larger than one chunk arrives whole.
        let big: String = client
            .query_one("SELECT repeat('x', 300000)", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(big.len(), 300000, "{upstream:?}");
        // The server saw the proxy's kind of upstream connection.
        let over_unix: bool = client
            .query_one("SELECT inet_client_addr() IS NULL", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(over_unix, unix, "{upstream:?}");

        assert_eq!(proxy.connections(), 1, "{upstream:?}");
        assert_eq!(proxy.fired(), 0, "{upstream:?}");
        assert!(proxy.bytes_down() > 300000, "{upstream:?}");
        assert!(proxy.bytes_up() > 0, "{upstream:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_reply_after_commit_of_an_insert() {
    let dsn = database("insert", false).await;
    let direct = connect(&dsn).await;
    direct
        .batch_execute("CREATE TABLE px_rows (v int PRIMARY KEY)")
        .await
        .unwrap();
    let (proxy, through) = proxy_for(&dsn).await;
    proxy.set_once(Fault::DropReplyAfterCommit(Trigger::QueryContains(
        "INSERT INTO px_rows".into(),
    )));
    let client = connect(&through).await;
    // Earlier queries on the connection are untouched.
    client.query_one("SELECT 1", &[]).await.unwrap();

    assert_io_error(
        client
            .execute("INSERT INTO px_rows VALUES ($1)", &[&42i32])
            .await,
        "the insert",
    );
    assert_eq!(proxy.fired(), 1);
    // Yet the row is committed: the proxy closed the client only after the server's
    // ReadyForQuery, which follows the commit.
    let rows: i64 = direct
        .query_one("SELECT count(*) FROM px_rows WHERE v = 42", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "the insert whose reply was dropped is committed");

    // A one-shot fault is gone: a retry through the proxy is answered, and it is the
    // server's answer to a duplicate.
    assert_eq!(proxy.fault(), Fault::None);
    let retry = connect(&through).await;
    let err = retry
        .execute("INSERT INTO px_rows VALUES ($1)", &[&42i32])
        .await
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("23505"), "{err}");
    assert_eq!(proxy.fired(), 1);
    drop((direct, client, retry));
    drop_database("insert").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_reply_after_the_nth_query_of_every_connection() {
    let dsn = database("nth", false).await;
    let direct = connect(&dsn).await;
    direct
        .batch_execute("CREATE TABLE px_rows (v int PRIMARY KEY)")
        .await
        .unwrap();
    let (proxy, through) = proxy_for(&dsn).await;
    // Set (not once): it hits each connection at its third query.
    proxy.set(Fault::DropReplyAfterCommit(Trigger::NthQuery(3)));
    for (i, v) in [7i32, 8].into_iter().enumerate() {
        let client = connect(&through).await;
        client.query_one("SELECT 1", &[]).await.unwrap();
        client.query_one("SELECT 2", &[]).await.unwrap();
        assert_io_error(
            client
                .execute("INSERT INTO px_rows VALUES ($1)", &[&v])
                .await,
            "the third query",
        );
        assert_eq!(proxy.fired(), i as u64 + 1);
    }
    let rows: Vec<i32> = direct
        .query("SELECT v FROM px_rows ORDER BY v", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, [7, 8]);
    assert_eq!(proxy.connections(), 2);
    drop(direct);
    drop_database("nth").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_reply_after_commit_of_idem_begin() {
    let dsn = database("begin", true).await;
    let direct = connect(&dsn).await;
    let (proxy, through) = proxy_for(&dsn).await;
    let scope = suite::scope("px");
    proxy.set_once(Fault::DropReplyAfterCommit(Trigger::QueryContains(
        "idem_begin".into(),
    )));
    let client = connect(&through).await;

    assert_io_error(
        client
            .query_one(
                "SELECT outcome, fence FROM idem_begin($1, $2)",
                &[&scope, &"k1"],
            )
            .await,
        "idem_begin",
    );
    assert_eq!(proxy.fired(), 1);

    // The claim is committed although its caller never learned its fence.
    let state: String = direct
        .query_one("SELECT state FROM idem_lookup($1, $2)", &[&scope, &"k1"])
        .await
        .unwrap()
        .get(0);
    assert_eq!(state, "in_progress");
    let again: String = direct
        .query_one("SELECT outcome FROM idem_begin($1, $2)", &[&scope, &"k1"])
        .await
        .unwrap()
        .get(0);
    assert_eq!(again, "in_progress", "the lost claim holds the key");
    drop((direct, client));
    drop_database("begin").await;
}

/// SSLRequest, the answer byte, then the simple protocol: the framing stays in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_reply_of_a_simple_query_after_an_ssl_request() {
    let dsn = database("simple", false).await;
    let direct = connect(&dsn).await;
    direct
        .batch_execute("CREATE TABLE px_rows (v int PRIMARY KEY)")
        .await
        .unwrap();
    let (proxy, through) = proxy_for(&dsn).await;
    proxy.set_once(Fault::DropReplyAfterCommit(Trigger::QueryContains(
        "px_simple".into(),
    )));

    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .unwrap();
    let mut ssl_request = 8u32.to_be_bytes().to_vec();
    ssl_request.extend_from_slice(&80877103u32.to_be_bytes());
    stream.write_all(&ssl_request).await.unwrap();
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await.unwrap();
    // The private clusters run without TLS: they refuse, and the startup follows in clear.
    assert_eq!(answer[0], b'N');
    let config: tokio_postgres::Config = through.parse().unwrap();
    let (client, connection) = config.connect_raw(stream, NoTls).await.unwrap();
    tokio::spawn(connection);

    client.simple_query("SELECT 1").await.unwrap();
    assert_io_error(
        client
            .simple_query("INSERT INTO px_rows VALUES (5) -- px_simple")
            .await,
        "the simple query",
    );
    assert_eq!(proxy.fired(), 1);
    let rows: i64 = direct
        .query_one("SELECT count(*) FROM px_rows WHERE v = 5", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    drop((direct, client));
    drop_database("simple").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_at_byte_cuts_a_reply_and_closes_both_sides() {
    let dsn = suite::dsn();
    let direct = connect(&dsn).await;
    let (proxy, through) = proxy_for(&dsn).await;
    let app = unique("px_cut");
    let client = connect(&format!("{through} application_name={app}")).await;
    client.query_one("SELECT 1", &[]).await.unwrap();
    assert_eq!(backends_named(&direct, &app).await, 1);

    // Set on an existing connection: 5000 bytes more, then the cut.
    let limit = proxy.bytes_down() + 5000;
    proxy.set(Fault::CloseAtByte(limit));
    assert_io_error(
        client.query_one("SELECT repeat('x', 200000)", &[]).await,
        "the large reply",
    );
    assert_eq!(proxy.bytes_down(), limit, "cut exactly at the limit");
    assert_eq!(proxy.fired(), 1);
    // The server's side was closed too: its backend ends.
    until_async(
        "the server's side of the cut connection to close",
        PATIENCE,
        || async { backends_named(&direct, &app).await == 0 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_holds_traffic_without_closing() {
    let dsn = suite::dsn();
    let direct = connect(&dsn).await;
    let (proxy, through) = proxy_for(&dsn).await;
    let app = unique("px_hole");
    let client = connect(&format!("{through} application_name={app}")).await;
    client.query_one("SELECT 1", &[]).await.unwrap();

    proxy.set(Fault::Blackhole);
    let stalled =
        tokio::time::timeout(Duration::from_secs(1), client.query_one("SELECT 2", &[])).await;
    assert!(
        stalled.is_err(),
        "answered through a blackhole: {stalled:?}"
    );
    assert!(proxy.fired() >= 1);
    // Nothing was closed: not the client's side, not the server's, and the held query
    // never reached the server.
    assert!(!client.is_closed());
    let last: Vec<String> = direct
        .query(
            "SELECT query FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(last, ["SELECT 1"]);

    // Lifted, the held traffic goes through and the connection works again.
    proxy.set(Fault::None);
    let n: i32 = tokio::time::timeout(Duration::from_secs(10), client.query_one("SELECT 3", &[]))
        .await
        .expect("no answer after the blackhole was lifted")
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_adds_latency_to_each_round_trip() {
    let dsn = suite::dsn();
    let (proxy, through) = proxy_for(&dsn).await;
    let client = connect(&through).await;
    let delay = Duration::from_millis(150);
    proxy.set(Fault::Delay(delay));
    let started = tokio::time::Instant::now();
    // One round trip: the query is delayed on the way in, the answer on the way out.
    client.simple_query("SELECT 1").await.unwrap();
    let took = started.elapsed();
    assert!(took >= 2 * delay, "one round trip took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_proxy_closes_its_connections_and_listener() {
    let dsn = suite::dsn();
    let direct = connect(&dsn).await;
    let (proxy, through) = proxy_for(&dsn).await;
    let port = proxy.port();
    let app = unique("px_drop");
    let client = connect(&format!("{through} application_name={app}")).await;
    client.query_one("SELECT 1", &[]).await.unwrap();

    drop(proxy);
    until_async(
        "the client's connection to close with the proxy",
        PATIENCE,
        || async { client.is_closed() },
    )
    .await;
    until_async(
        "the server's side to close with the proxy",
        PATIENCE,
        || async { backends_named(&direct, &app).await == 0 },
    )
    .await;
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_cuts_one_connection_and_passes_no_close_on() {
    let dsn = suite::dsn();
    let direct = connect(&dsn).await;
    let (proxy, through) = proxy_for(&dsn).await;
    let last_query = |app: String| {
        let direct = &direct;
        async move {
            direct
                .query_one(
                    "SELECT state, query FROM pg_stat_activity WHERE application_name = $1",
                    &[&app],
                )
                .await
                .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                .ok()
        }
    };
    let apps = [unique("px_half_req"), unique("px_half_commit")];
    for (cut, app) in [(Cut::Request, &apps[0]), (Cut::AfterCommit, &apps[1])] {
        let (client, connection) =
            tokio_postgres::connect(&format!("{through} application_name={app}"), NoTls)
                .await
                .unwrap();
        let task = tokio::spawn(connection);
        client.query_one("SELECT 1", &[]).await.unwrap();
        proxy.set_once(Fault::HalfOpen(
            Trigger::QueryContains("cut me".into()),
            cut,
        ));
        let fired = proxy.fired();
        let stalled = tokio::time::timeout(
            Duration::from_millis(500),
            client.query_one("SELECT 'cut me'", &[]),
        )
        .await;
        assert!(stalled.is_err(), "{cut:?}: answered: {stalled:?}");
        assert_eq!(proxy.fired(), fired + 1, "{cut:?}");
        // Before the commit, the server never got the query; after, it ran it.
        let seen = last_query(app.clone()).await;
        let expected = match cut {
            Cut::Request => "SELECT 1",
            Cut::AfterCommit => "SELECT 'cut me'",
        };
        assert_eq!(
            seen,
            Some(("idle".to_string(), expected.to_string())),
            "{cut:?}"
        );
        // The client goes away (its socket closes): the server is not told. Nothing can
        // be waited for here but time: the session is still there a second later.
        task.abort();
        let _ = task.await;
        drop(client);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            last_query(app.clone()).await.is_some(),
            "{cut:?}: the client's close reached the server"
        );
    }
    // Other connections are untouched (the fault fired once and is gone).
    let other = connect(&through).await;
    other.query_one("SELECT 'cut me'", &[]).await.unwrap();
    // Dropping the proxy closes the server's side: the half-open sessions end.
    drop(proxy);
    until_async("the half-open sessions to end", PATIENCE, || async {
        backends_named(&direct, &apps[0]).await + backends_named(&direct, &apps[1]).await == 0
    })
    .await;
}
