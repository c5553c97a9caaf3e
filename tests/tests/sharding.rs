//! The SQL API through the PL/Proxy layer (sql/proxy/): a proxy database in front of
//! partition databases that each run the backend under test (`PGIDEM_BACKEND`), one module
//! per area (sharding/<module>.rs), linked as one test binary. PL/Proxy is Debian's
//! package for PostgreSQL 15; on another server every test is skipped with its reason.
//! Each test makes its own proxy and partitions (pg_idempotency_tests::sharded).
//!
//! - batch: a batch reaches each key's partition, in one call per partition
//! - calls: the state machine through the proxy, each record on the partition its key
//!   hashes to and on no other
//! - race: many sessions on one hot key through the proxy: exactly one claims
//! - routing: keys spread over every partition, by the documented hash
//! - fences: each partition's fences in a range of its own, unique across partitions
//! - roles: the calling role reaches the partition: owners and isolation hold
//! - identity: docs/security.md's identity table through the proxy (a SECURITY DEFINER
//!   wrapper's callers refused, a grant role refused); nothing executable by PUBLIC
//! - outage: one partition down: only its keys fail, and work again when it returns
//! - purge: purge and metrics ask every partition
//! - cron: one pg_cron job on the proxy purges every partition
//! - configure: idem_proxy_configure refuses what PL/Proxy cannot route
//! - reshard: growing from 2 to 4 partitions under load (scripts/reshard.sh)
//! - signatures: the proxy declares the API as the partitions do

#[path = "sharding/batch.rs"]
mod batch;
#[path = "sharding/calls.rs"]
mod calls;
#[path = "sharding/configure.rs"]
mod configure;
#[path = "sharding/cron.rs"]
mod cron;
#[path = "sharding/fences.rs"]
mod fences;
#[path = "sharding/identity.rs"]
mod identity;
#[path = "sharding/outage.rs"]
mod outage;
#[path = "sharding/purge.rs"]
mod purge;
#[path = "sharding/race.rs"]
mod race;
#[path = "sharding/reshard.rs"]
mod reshard;
#[path = "sharding/roles.rs"]
mod roles;
#[path = "sharding/routing.rs"]
mod routing;
#[path = "sharding/signatures.rs"]
mod signatures;
