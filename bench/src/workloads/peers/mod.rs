//! Against the peers: pg_idempotency beside what a user would use otherwise, each peer
//! installed from its registry (scripts/peers.sh), in the same run on this machine, with
//! the same cases (cases.rs), at added round-trip times of 0, 0.2 and 1 ms.
//!
//! Every row whose store is across a network (PostgreSQL, Redis) reaches it through a
//! delay forwarder (crate::delay), 0 ms included, so that every setting pays the same hop;
//! what each setting actually adds is measured (rtt.rs) and reported beside its target.
//! Round trips per call are counted by the forwarder at 0 ms (request turns over N calls,
//! minus a run of none).

pub mod cases;
mod driver;
mod rtt;
mod rust_rows;
pub mod systems;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cases::{Case, Measured, Target};
use driver::Driver;
use systems::{Runner, Store, System, SYSTEMS};

use crate::delay::DelayProxy;
use crate::harness::BenchResult;

/// Where the stores and the drivers are.
pub struct PeersOptions<'a> {
    pub dsn: &'a str,
    pub portable_dsn: Option<&'a str>,
    pub redis_port: Option<u16>,
    pub redis_durable_port: Option<u16>,
    /// The Python venv's interpreter (scripts/peers.sh), if installed.
    pub python: Option<String>,
    /// node, if the Node.js peers are installed.
    pub node: Option<String>,
    /// Only these rows (ids of systems.rs), when given.
    pub rows: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct PeersPlan {
    pub warmup: Duration,
    pub duration: Duration,
    /// (duplicates, rounds) of each hot-key case.
    pub hot: Vec<(usize, usize)>,
    pub failure_keys: usize,
    pub retries: usize,
    /// Calls per round-trip count.
    pub count_calls: usize,
    /// Every row runs its new-key and replay cases this many times at each setting, the
    /// rows taking turns, so that a slow moment of the shared disk falls on all of them
    /// rather than on one (the hot-key and failure cases run in the first round).
    pub rounds: usize,
    pub rtts: Vec<Duration>,
}

impl PeersPlan {
    fn cases(&self, system: &System, round: usize) -> Vec<Case> {
        let mut c = vec![
            Case::New {
                warmup: self.warmup,
                duration: self.duration,
            },
            Case::Replay {
                warmup: self.warmup,
                duration: self.duration,
            },
        ];
        if round > 0 {
            return c;
        }
        for &(concurrency, rounds) in &self.hot {
            c.push(Case::Hot {
                concurrency,
                rounds,
            });
        }
        if system.failure_case {
            c.push(Case::Failure {
                rounds: self.failure_keys,
                retries: self.retries,
            });
        }
        c
    }
}

pub enum RowResult {
    Measured(Vec<(Case, Measured)>),
    Skipped(String),
}

/// Every row at one delay setting.
pub struct RttRun {
    pub target: Duration,
    /// Measured: `SELECT 1` through the forwarder minus directly (medians).
    pub added_pg: Duration,
    /// Measured: Redis `PING` the same way, when there is a Redis.
    pub added_redis: Option<Duration>,
    /// In `SYSTEMS` order; a row in memory runs at the first setting only (it crosses no
    /// network, so the delay does not apply) and is absent from the others.
    pub rows: Vec<(&'static System, RowResult)>,
}

pub struct PeersReport {
    pub server: String,
    /// `fsync` and `synchronous_commit` as the server runs them.
    pub settings: String,
    /// redis-server's version, when there is a Redis.
    pub redis_version: Option<String>,
    /// /proc/loadavg before and after: other work on the machine shows here.
    pub load: (String, String),
    pub runs: Vec<RttRun>,
    /// Round trips per call (new key, replay), counted at 0 ms; None when not counted.
    pub round_trips: Vec<(&'static System, Option<(f64, f64)>)>,
    pub versions: BTreeMap<String, String>,
    pub plan: PeersPlan,
}

pub enum Outcome {
    Skipped(String),
    Measured(Box<PeersReport>),
}

struct Setup {
    pg: SocketAddr,
    pg_user: String,
    pg_db: String,
    portable_db: Option<String>,
    python: Option<Driver>,
    node: Option<Driver>,
}

fn driver(interpreter: &Option<String>, script: &str) -> Option<Driver> {
    let interpreter = interpreter.as_ref().filter(|i| !i.is_empty())?;
    Some(Driver {
        interpreter: interpreter.clone(),
        script: format!("{}/peers/{script}", env!("CARGO_MANIFEST_DIR")),
    })
}

/// Why a row cannot run here, if it cannot.
fn missing(system: &System, o: &PeersOptions, s: &Setup) -> Option<String> {
    match system.runner {
        Runner::Python(_) if s.python.is_none() => {
            return Some("the Python peers are not installed (scripts/peers.sh needs a python3 with venv and pip)".into())
        }
        Runner::Node(_) if s.node.is_none() => {
            return Some("the Node.js peers are not installed (scripts/peers.sh needs node and npm)".into())
        }
        _ => {}
    }
    match system.store {
        Store::Redis if o.redis_port.is_none() => {
            Some("no Redis (`--redis-port`: scripts/redis.sh, Debian's redis-server)".into())
        }
        Store::RedisDurable if o.redis_durable_port.is_none() => Some(
            "no durable Redis (`--redis-durable-port`: scripts/redis-durable.sh, Debian's redis-server)".into(),
        ),
        Store::PgPortable if s.portable_db.is_none() => {
            Some("no database with the portable SQL variant (`--portable-dsn`)".into())
        }
        _ => None,
    }
}

/// Forwarders of one delay setting, one per store that has a server.
struct Proxies {
    pg: DelayProxy,
    redis: Option<DelayProxy>,
    redis_durable: Option<DelayProxy>,
    pg_upstream: SocketAddr,
    redis_upstream: Option<SocketAddr>,
    redis_durable_upstream: Option<SocketAddr>,
}

impl Proxies {
    fn target(&self, store: Store, s: &Setup) -> Option<Target> {
        let local = |port: u16, db: &str| Target {
            host: "127.0.0.1".into(),
            port,
            dbname: db.into(),
            user: s.pg_user.clone(),
        };
        match store {
            Store::PgExtension | Store::PgTable => Some(local(self.pg.port(), &s.pg_db)),
            Store::PgPortable => Some(local(self.pg.port(), s.portable_db.as_deref()?)),
            Store::Redis => Some(local(self.redis.as_ref()?.port(), "")),
            Store::RedisDurable => Some(local(self.redis_durable.as_ref()?.port(), "")),
            Store::Memory => None,
        }
    }

    /// The server a store's forwarder forwards to.
    fn upstream(&self, store: Store) -> Option<SocketAddr> {
        match store {
            Store::PgExtension | Store::PgPortable | Store::PgTable => Some(self.pg_upstream),
            Store::Redis => self.redis_upstream,
            Store::RedisDurable => self.redis_durable_upstream,
            Store::Memory => None,
        }
    }
}

fn row_name(s: &System) -> String {
    format!("{} ({})", s.name, s.store.name())
}

fn chosen(o: &PeersOptions, s: &System) -> bool {
    o.rows.is_empty() || o.rows.iter().any(|r| r == s.id)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

async fn redis_version(port: u16) -> BenchResult<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let mut c = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_string())
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn run_row(
    system: &'static System,
    target: Option<&Target>,
    cases: &[Case],
    s: &Setup,
) -> BenchResult<Vec<Measured>> {
    match system.runner {
        Runner::Python(peer) => {
            s.python
                .as_ref()
                .ok_or("no python")?
                .run(peer, target, cases)
                .await
        }
        Runner::Node(peer) => {
            s.node
                .as_ref()
                .ok_or("no node")?
                .run(peer, target, cases)
                .await
        }
        Runner::Rust(kind) => {
            rust_rows::run(kind, target.ok_or("a Rust row needs a store")?, cases).await
        }
    }
}

/// Round trips per call of a new key and of a replay, counted by a forwarder of the row's
/// own (0 ms), so that no other row's connections (a pool closing, say) add to its count.
async fn count(
    system: &'static System,
    proxies: &Proxies,
    calls: usize,
    s: &Setup,
) -> BenchResult<(f64, f64)> {
    let upstream = proxies
        .upstream(system.store)
        .ok_or("a row in memory has no round trips to count")?;
    let proxy = DelayProxy::start(upstream, Duration::ZERO)?;
    let mut target = proxies
        .target(system.store, s)
        .ok_or("a row in memory has no round trips to count")?;
    target.port = proxy.port();
    let target = &target;
    let turns = || proxy.turns();
    let d = match system.runner {
        Runner::Python(peer) => (s.python.as_ref(), peer),
        Runner::Node(peer) => (s.node.as_ref(), peer),
        Runner::Rust(kind) => {
            return rust_rows::round_trips(kind, target, &turns, calls).await;
        }
    };
    let (Some(driver), peer) = d else {
        return Err("no driver".into());
    };
    let mut per_call = Vec::new();
    for case in ["new", "replay"] {
        let t = turns();
        driver.run_calls(peer, target, case, 0).await?;
        let none = turns() - t;
        let t = turns();
        driver.run_calls(peer, target, case, calls).await?;
        let some = turns() - t;
        per_call.push(some.saturating_sub(none) as f64 / calls as f64);
    }
    Ok((per_call[0], per_call[1]))
}

pub async fn run(o: &PeersOptions<'_>, plan: PeersPlan) -> BenchResult<Outcome> {
    let config: tokio_postgres::Config = o.dsn.parse()?;
    let port = *config.get_ports().first().unwrap_or(&5432);
    let portable_db = match o.portable_dsn {
        Some(p) => {
            let c: tokio_postgres::Config = p.parse()?;
            c.get_dbname().map(str::to_string)
        }
        None => None,
    };
    let s = Setup {
        pg: local(port),
        pg_user: config.get_user().unwrap_or("postgres").to_string(),
        pg_db: config.get_dbname().unwrap_or("postgres").to_string(),
        portable_db,
        python: driver(&o.python, "python/driver.py"),
        node: driver(&o.node, "node/driver.js"),
    };
    // Rows whose parts are all missing: the section says so rather than show empty tables.
    let reasons: Vec<String> = SYSTEMS
        .iter()
        .filter(|sys| chosen(o, sys))
        .map(|sys| missing(sys, o, &s).map(|r| format!("{}: {r}", row_name(sys))))
        .collect::<Option<_>>()
        .unwrap_or_default();
    if !reasons.is_empty() {
        return Ok(Outcome::Skipped(format!(
            "every row's parts are missing: {}",
            reasons.join("; ")
        )));
    }
    let load_before = load();
    let c = crate::harness::connect(o.dsn).await?;
    let server: String = c.query_one("SELECT version()", &[]).await?.get(0);
    let mut settings = Vec::new();
    for name in ["fsync", "synchronous_commit"] {
        let v: String = c.query_one(&format!("SHOW {name}"), &[]).await?.get(0);
        settings.push(format!("`{name}` = {v}"));
    }
    let redis_version = match o.redis_port {
        Some(p) => Some(redis_version(p).await?),
        None => None,
    };
    let mut versions = BTreeMap::new();
    for d in [&s.python, &s.node].into_iter().flatten() {
        versions.extend(d.versions().await?);
    }

    let mut runs = Vec::new();
    let mut round_trips = Vec::new();
    for (i, &rtt) in plan.rtts.iter().enumerate() {
        let proxies = Proxies {
            pg: DelayProxy::start(s.pg, rtt)?,
            redis: o
                .redis_port
                .map(|p| DelayProxy::start(local(p), rtt))
                .transpose()?,
            redis_durable: o
                .redis_durable_port
                .map(|p| DelayProxy::start(local(p), rtt))
                .transpose()?,
            pg_upstream: s.pg,
            redis_upstream: o.redis_port.map(local),
            redis_durable_upstream: o.redis_durable_port.map(local),
        };
        let pg_via = Target {
            host: "127.0.0.1".into(),
            port: proxies.pg.port(),
            dbname: s.pg_db.clone(),
            user: s.pg_user.clone(),
        };
        let pg_direct = Target {
            port,
            ..pg_via.clone()
        };
        let added_pg = rtt::postgres(&pg_via.pg_dsn(), &pg_direct.pg_dsn()).await?;
        let added_redis = match (&proxies.redis, o.redis_port) {
            (Some(p), Some(direct)) => Some(rtt::redis(p.port(), direct).await?),
            _ => None,
        };
        eprintln!(
            "peers: added RTT {rtt:?}: measured {added_pg:?} (PostgreSQL), {added_redis:?} (Redis)"
        );
        let mut rows: Vec<(&'static System, RowResult)> = Vec::new();
        for round in 0..plan.rounds.max(1) {
            for system in SYSTEMS.iter().filter(|s| chosen(o, s)) {
                if !system.store.networked() && i > 0 {
                    continue;
                }
                if let Some(reason) = missing(system, o, &s) {
                    if round == 0 {
                        // Said here as well as in the report: a missing peer never passes
                        // silently.
                        if i == 0 {
                            eprintln!("peers: {}: skipped: {reason}", row_name(system));
                        }
                        rows.push((system, RowResult::Skipped(reason)));
                    }
                    continue;
                }
                let target = proxies.target(system.store, &s);
                let cases = plan.cases(system, round);
                let measured = run_row(system, target.as_ref(), &cases, &s).await?;
                for (case, m) in cases.iter().zip(&measured) {
                    if m.stats.ops == 0 {
                        return Err(format!(
                            "peers: {} ({}), {case:?} at {rtt:?} completed no call",
                            system.name,
                            system.store.name()
                        )
                        .into());
                    }
                }
                eprintln!(
                    "peers: {rtt:?}, round {}: {} ({}) done",
                    round + 1,
                    system.name,
                    system.store.name()
                );
                let measured: Vec<(Case, Measured)> = cases.into_iter().zip(measured).collect();
                match rows.iter_mut().find(|(s, _)| s.id == system.id) {
                    Some((_, RowResult::Measured(earlier))) => {
                        for (case, m) in measured {
                            if let Some((_, e)) = earlier.iter_mut().find(|(c, _)| *c == case) {
                                e.merge(m);
                            }
                        }
                    }
                    _ => rows.push((system, RowResult::Measured(measured))),
                }
            }
        }
        if rtt.is_zero() {
            for system in SYSTEMS.iter().filter(|s| chosen(o, s)) {
                if missing(system, o, &s).is_some() || !system.store.networked() {
                    round_trips.push((system, None));
                    continue;
                }
                let counted = count(system, &proxies, plan.count_calls, &s).await?;
                round_trips.push((system, Some(counted)));
            }
        }
        runs.push(RttRun {
            target: rtt,
            added_pg,
            added_redis,
            rows,
        });
    }
    Ok(Outcome::Measured(Box::new(PeersReport {
        server,
        settings: settings.join(", "),
        redis_version,
        load: (load_before, load()),
        runs,
        round_trips,
        versions,
        plan,
    })))
}
