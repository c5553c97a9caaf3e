//! A duplicate `begin` that waits for a live holder, started so that the test knows it is
//! waiting (it has read the holder's claim) before the holder finishes. Each store shows
//! that differently; none of them is a sleep that "should be enough":
//!
//! - `PgStore`: the waiter's own session is seen in pg_stat_activity asleep inside
//!   `idem_begin`: wait event `Extension` (the extension's nap, a `WaitLatch` of
//!   `PG_WAIT_EXTENSION`) or `PgSleep` (the portable variant's `pg_sleep`). Both backends
//!   nap only after reading a live holder's record. Through a PL/Proxy proxy, the session
//!   watched is the partition's backend that PL/Proxy calls the key's partition through
//!   for the waiter's session (which it asks for its pid first). Through a pooler in
//!   transaction mode (PgBouncer) the waiter's session has no pid of its own: the server
//!   connection is lent per transaction. There the waiter's connection has an
//!   `application_name` of its own, which PgBouncer sets on the server connection it lends.
//! - `MemoryStore`: it has no waiting state to observe, but its `begin` decides under its
//!   lock within the first poll of its future and only awaits when it waits; it registers
//!   on the store's `Notify` before that decision, and `notify_waiters` reaches a
//!   registered `Notified` from its creation on. So a first poll that returns `Pending`
//!   means the waiter has seen the holder's claim and will be woken by its completion.
//! - `RedisStore`: the waiter gets a connection of its own, and the server's `CLIENT LIST`
//!   shows that connection's last command: once it is `evalsha` (the begin script; the
//!   holder's claim loaded it on the server already), the waiter has read the claim and
//!   polls again after a pause.

use std::future::{poll_fn, Future};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use pg_idempotency_client::*;
use tokio::task::JoinHandle;
use tokio_postgres::types::Type;

use super::harness::{Backend, Harness};
use super::support::Deadline;
use crate::common::*;

pub type Waiter = JoinHandle<Result<Begin>>;

impl Harness {
    /// Starts `begin(scope, key, o)` (with `o.wait` set) and returns once it is waiting.
    pub async fn begin_waiting(&self, scope: &str, key: &str, o: BeginOptions) -> Waiter {
        assert!(!o.wait.is_zero(), "a waiting begin needs a wait");
        let (scope, key) = (scope.to_string(), key.to_string());
        match &self.backend {
            Backend::Postgres(pool) => {
                let name = unique("waiter");
                let mut config: tokio_postgres::Config = dsn().parse().expect("PGIDEM_DSN");
                config.application_name(&name);
                let (client, conn) = config
                    .connect(tokio_postgres::NoTls)
                    .await
                    .expect("a session for the waiter");
                tokio::spawn(conn);
                let pid: Option<i32> = if through_pooler() {
                    None
                } else if self.proxied {
                    // Through a proxy the call waits on its partition, in the backend of the
                    // connection PL/Proxy keeps from this session to the key's partition.
                    client
                        .batch_execute(
                            "CREATE FUNCTION pg_temp.partition_pid(scope text, key text) \
                             RETURNS integer LANGUAGE plproxy AS $$ \
                             CLUSTER 'pg_idempotency'; \
                             RUN ON idempotency._idem_partition(scope, key); \
                             SELECT pg_catalog.pg_backend_pid() AS partition_pid; $$",
                        )
                        .await
                        .expect("a function to learn the partition's backend");
                    Some(
                        client
                            .query_one("SELECT pg_temp.partition_pid($1, $2)", &[&scope, &key])
                            .await
                            .expect("the partition's backend")
                            .get(0),
                    )
                } else {
                    Some(
                        client
                            .query_one("SELECT pg_backend_pid()", &[])
                            .await
                            .expect("its pid")
                            .get(0),
                    )
                };
                let store = pg_store(Arc::new(client));
                let waiter = tokio::spawn(async move { store.begin(&scope, &key, &o).await });
                let watcher = pool.get().await.expect("a connection");
                let mut deadline =
                    Deadline::new("the waiter asleep in idem_begin", Duration::from_secs(10));
                loop {
                    // By pid, or (through a pooler) by the waiter's application_name.
                    let rows = watcher
                        .query_typed(
                            "SELECT wait_event_type, wait_event FROM pg_stat_activity \
                             WHERE pid = $1 OR ($1 IS NULL AND application_name = $2)",
                            &[(&pid, Type::INT4), (&name, Type::TEXT)],
                        )
                        .await
                        .expect("pg_stat_activity");
                    let (kind, event): (Option<String>, Option<String>) = rows
                        .first()
                        .map_or((None, None), |row| (row.get(0), row.get(1)));
                    if kind.as_deref() == Some("Extension") || event.as_deref() == Some("PgSleep") {
                        return waiter;
                    }
                    assert!(!waiter.is_finished(), "the waiter answered without waiting");
                    deadline.tick_every(Duration::from_millis(1)).await;
                }
            }
            Backend::Memory => {
                let store = self.store.clone();
                let mut call = Box::pin(async move { store.begin(&scope, &key, &o).await });
                let first = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
                assert!(first.is_pending(), "the waiter answered at once: {first:?}");
                tokio::spawn(call)
            }
            #[cfg(feature = "redis")]
            Backend::Redis {
                client,
                conn,
                prefix,
            } => {
                let mut own = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("a connection for the waiter");
                let id: i64 = redis::cmd("CLIENT")
                    .arg("ID")
                    .query_async(&mut own)
                    .await
                    .expect("CLIENT ID");
                let store = RedisStore::new(own, prefix.clone());
                let waiter = tokio::spawn(async move { store.begin(&scope, &key, &o).await });
                let mut deadline =
                    Deadline::new("the waiter's begin script run", Duration::from_secs(10));
                loop {
                    let info: String = redis::cmd("CLIENT")
                        .arg("LIST")
                        .arg("ID")
                        .arg(id)
                        .query_async(&mut conn.clone())
                        .await
                        .expect("CLIENT LIST");
                    if info.split_whitespace().any(|f| f == "cmd=evalsha") {
                        return waiter;
                    }
                    assert!(!waiter.is_finished(), "the waiter answered without waiting");
                    deadline.tick_every(Duration::from_millis(1)).await;
                }
            }
        }
    }
}
