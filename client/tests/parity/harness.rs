//! The stores under test, each made fresh for one test, and what a scenario may ask of a
//! store beyond the store interface: whether a record is still physically kept (to see
//! what `purge` removed). How a waiting `begin` is observed is in waiting.rs.

use std::ops::Deref;
use std::sync::Arc;

use pg_idempotency_client::*;
use tokio_postgres::types::Type;

use crate::common::*;

pub(crate) enum Backend {
    Postgres(deadpool_postgres::Pool),
    Memory,
    #[cfg(feature = "redis")]
    Redis {
        client: redis::Client,
        conn: redis::aio::MultiplexedConnection,
        prefix: String,
    },
}

/// One store, as a scenario sees it: the store itself (through `Deref`) and its backend.
pub struct Harness {
    pub store: Arc<dyn IdempotencyStore>,
    pub(crate) backend: Backend,
    /// `PGIDEM_DSN` is a PL/Proxy proxy (sql/proxy/): the records are on its partitions.
    pub(crate) proxied: bool,
}

impl Deref for Harness {
    type Target = dyn IdempotencyStore;
    fn deref(&self) -> &Self::Target {
        self.store.as_ref()
    }
}

impl Harness {
    /// `PgStore` over whichever backend (extension or portable SQL) `PGIDEM_DSN`'s database
    /// has installed.
    pub async fn postgres() -> Option<Harness> {
        let pool = pool();
        let store = pg_store(pool.clone());
        store
            .check_installed()
            .await
            .expect("pg_idempotency installed in PGIDEM_DSN's database");
        let proxied: bool = pool
            .get()
            .await
            .expect("a connection")
            .query_typed(
                "SELECT to_regprocedure('idempotency._idem_partition(text, text)') IS NOT NULL",
                &[],
            )
            .await
            .expect("the catalog")[0]
            .get(0);
        Some(Harness {
            store: Arc::new(store),
            backend: Backend::Postgres(pool),
            proxied,
        })
    }

    /// A `MemoryStore` of this test's own.
    pub async fn memory() -> Option<Harness> {
        Some(Harness {
            store: Arc::new(MemoryStore::new()),
            backend: Backend::Memory,
            proxied: false,
        })
    }

    /// A `RedisStore` on the test Redis under a prefix of this test's own; None (the test
    /// recorded as skipped, with its reason) without a Redis server or the `redis` feature.
    #[cfg(feature = "redis")]
    pub async fn redis() -> Option<Harness> {
        let url = redis_url()?;
        let (client, conn) = redis_connection(&url).await;
        let prefix = unique("parity") + ":";
        Some(Harness {
            store: Arc::new(RedisStore::new(conn.clone(), prefix.clone())),
            backend: Backend::Redis {
                client,
                conn,
                prefix,
            },
            proxied: false,
        })
    }

    #[cfg(not(feature = "redis"))]
    pub async fn redis() -> Option<Harness> {
        pg_idempotency_tests::skip(
            pg_idempotency_tests::Skip::NotApplicable,
            "built without the client's redis feature (--features pg_idempotency_client/redis)",
        );
        None
    }

    /// A scope no other test uses.
    pub fn scope(&self, name: &str) -> String {
        unique(name)
    }

    /// Whether the store still keeps the record's data, live or expired (purge removes the
    /// expired ones); None where that cannot be seen from outside (`MemoryStore`, and a
    /// proxy, whose records are on its partitions: the sharding suite looks there).
    pub async fn kept(&self, scope: &str, key: &str) -> Option<bool> {
        match &self.backend {
            Backend::Postgres(_) if self.proxied => None,
            Backend::Postgres(pool) => {
                let c = pool.get().await.expect("a connection");
                let n: i64 = c
                    .query_typed(
                        "SELECT count(*) FROM idempotency.records WHERE scope = $1 AND key = $2",
                        &[(&scope, Type::TEXT), (&key, Type::TEXT)],
                    )
                    .await
                    .expect("the records table")[0]
                    .get(0);
                Some(n > 0)
            }
            Backend::Memory => None,
            #[cfg(feature = "redis")]
            Backend::Redis { conn, prefix, .. } => {
                // RedisStore's key layout: <prefix><scope length>:<scope>:<key>.
                let name = format!("{prefix}{}:{scope}:{key}", scope.len());
                let n: i64 = redis::cmd("EXISTS")
                    .arg(name)
                    .query_async(&mut conn.clone())
                    .await
                    .expect("EXISTS");
                Some(n > 0)
            }
        }
    }

    /// Who owns this test's records as `metrics` names them: the connection's role on
    /// PostgreSQL; nobody in the stores without roles.
    pub async fn owner(&self) -> Option<String> {
        match &self.backend {
            Backend::Postgres(pool) => {
                let c = pool.get().await.expect("a connection");
                let rows = c.query_typed("SELECT current_user::text", &[]).await;
                Some(rows.expect("current_user")[0].get(0))
            }
            _ => None,
        }
    }

    /// Whether an uncached failure is a sample of the scope's estimate: not on the PL/pgSQL
    /// variant, whose estimate is read from the records an uncached failure does not leave.
    pub fn samples_uncached_failures(&self) -> bool {
        match &self.backend {
            Backend::Postgres(_) => {
                pg_idempotency_tests::backend() == pg_idempotency_tests::Backend::Extension
            }
            _ => true,
        }
    }

    /// Whether a refusal that `begin` raises (a mismatch) is counted: all but the portable
    /// SQL variant, whose counts are its transactions' and the refusal rolls its back
    /// (docs/decisions.md, "Counts that never fold"; idem_metrics' note says so).
    pub fn counts_raised_refusals(&self) -> bool {
        self.samples_uncached_failures()
    }

    /// Whether a scope's duration estimate (retry_after) is kept where its calls' keys
    /// land: the portable variant reads it from the records, so through a proxy a call
    /// learns only from the samples on its own partition, and the scenarios that make the
    /// sample under another key do not apply (recorded as a skip). The extension keeps it
    /// in the server's shared memory, which the test command's partitions share.
    pub fn estimates_stay_on_their_partition(&self) -> bool {
        let per_partition = self.proxied
            && pg_idempotency_tests::backend() == pg_idempotency_tests::Backend::Portable;
        if per_partition {
            pg_idempotency_tests::skip(
                pg_idempotency_tests::Skip::NotApplicable,
                "through a PL/Proxy proxy the portable variant estimates a scope's duration from \
                 the records on the call's own partition; this scenario samples under another key",
            );
        }
        per_partition
    }

    /// Whether a batch refused for one item changes nothing on every item: through a
    /// PL/Proxy proxy each partition commits its own items (docs/scaling.md), so an item
    /// refused on one partition does not undo another partition's; recorded as a skip of
    /// that part.
    pub fn batches_are_atomic(&self) -> bool {
        if self.proxied {
            pg_idempotency_tests::skip(
                pg_idempotency_tests::Skip::NotApplicable,
                "through a PL/Proxy proxy each partition commits its own items of a batch: an item \
                 refused on one partition does not undo another partition's",
            );
        }
        !self.proxied
    }

    /// Makes Redis forget its loaded scripts (SCRIPT FLUSH), as a restart does, where the
    /// store is Redis; true when it did. A pipeline of scripts does not load them itself.
    pub async fn forget_loaded_scripts(&self) -> bool {
        match &self.backend {
            #[cfg(feature = "redis")]
            Backend::Redis { conn, .. } => {
                let mut conn = conn.clone();
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut conn)
                    .await
                    .expect("SCRIPT FLUSH");
                true
            }
            _ => false,
        }
    }

    /// Whether this test's store instance is its alone, so that `purge` counts only the
    /// records this test made.
    pub fn private(&self) -> bool {
        matches!(self.backend, Backend::Memory)
    }
}
