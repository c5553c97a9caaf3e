//! Claim + complete of a new key through a PL/Proxy proxy (sql/proxy/), beside the same
//! two calls made directly on one of that proxy's partitions, alternating in one run.
//!
//! Each proxy is given by its DSN; the bench reads its partitions' connection strings from
//! the proxy's own SQL/MED server (what `idem_proxy_configure` wrote), so it needs no
//! naming convention with the script that made them (scripts/sharded.sh). The direct side
//! connects to partition 0 as the same role. The proxy's side and the direct side use
//! scopes of their own, so that the keys each partition holds afterwards are the proxy's
//! routing alone: that is the distribution the report gives.
//!
//! PL/Proxy is Debian's package for PostgreSQL 15 only here; without a proxy the workload
//! is skipped, and the report says so.

use std::sync::Arc;

use super::Row;
use crate::harness::{compare_across, connect, fresh_key, prepared, BenchResult, Op, Plan};

const BEGIN: &str = "SELECT fence FROM idem_begin($1, $2)";
const COMPLETE: &str = "SELECT state FROM idem_complete($1, $2, $3, '{\"ok\": true}')";
const PROXY_SCOPE: &str = "bench_proxy";
const DIRECT_SCOPE: &str = "bench_direct";
/// The proxy's routing hash alone (sql/proxy/: SHA-256 in SQL), beside a statement that
/// takes and returns the same two values: how much of the hop is choosing the partition.
const ROUTE: &str = "SELECT idempotency._idem_partition($1, $2)";
const NO_ROUTE: &str = "SELECT $1::text, $2::text";

/// One proxy, as found from its DSN.
pub struct Proxy {
    pub dsn: String,
    pub partitions: Vec<String>,
    /// "extension" or "portable SQL": what partition 0 has installed.
    pub backend: &'static str,
    /// The server's version, from partition 0 (the proxy is on the same server here).
    pub server: String,
}

/// The figures of one proxy.
pub struct Measured {
    pub backend: &'static str,
    pub partitions: usize,
    /// One row per client count: ours is the proxy, the baseline partition 0 directly.
    pub rows: Vec<(usize, Row)>,
    /// Records of the proxy's scope on each partition after the run.
    pub distribution: Vec<i64>,
}

pub struct Report {
    pub server: String,
    pub measured: Vec<Measured>,
    /// The routing hash beside its floor, on the first proxy, 1 client.
    pub routing: Row,
}

pub enum Outcome {
    Skipped(String),
    Measured(Report),
}

/// Reads a proxy's partitions (options p0, p1, ... of its `pg_idempotency` server) and
/// which backend they run.
pub async fn discover(dsn: &str) -> BenchResult<Proxy> {
    let c = connect(dsn).await?;
    let row = c
        .query_one(
            "SELECT current_user::text, \
                    (SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'pg_idempotency')",
            &[],
        )
        .await?;
    let user: String = row.get(0);
    let options: Option<Vec<String>> = row.get(1);
    let mut numbered: Vec<(usize, String)> = options
        .ok_or_else(|| format!("{dsn}: not a pg_idempotency proxy (no server pg_idempotency: run idem_proxy_configure)"))?
        .into_iter()
        .filter_map(|o| {
            let (name, value) = o.split_once('=')?;
            let n = name.strip_prefix('p')?.parse().ok()?;
            // PL/Proxy connects as the calling role when the string names none; so do we.
            Some((n, format!("{value} user={user}")))
        })
        .collect();
    numbered.sort();
    let partitions: Vec<String> = numbered.into_iter().map(|(_, s)| s).collect();
    let first = partitions
        .first()
        .ok_or_else(|| format!("{dsn}: the proxy has no partitions"))?;
    let p0 = connect(first).await?;
    let row = p0
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_idempotency'), version()",
            &[],
        )
        .await?;
    Ok(Proxy {
        dsn: dsn.into(),
        backend: if row.get(0) {
            "extension"
        } else {
            "portable SQL"
        },
        server: row.get(1),
        partitions,
    })
}

fn claim_complete(scope: &'static str) -> Op {
    Arc::new(move |client, _| {
        Box::pin(async move {
            let key = fresh_key("shard");
            let begin = prepared(&client, BEGIN).await?;
            let fence: Option<i64> = client.query_one(&begin, &[&scope, &key]).await?.get(0);
            let complete = prepared(&client, COMPLETE).await?;
            client.query_one(&complete, &[&scope, &key, &fence]).await?;
            Ok(())
        })
    })
}

fn statement(sql: &'static str) -> Op {
    Arc::new(move |client, _| {
        Box::pin(async move {
            let key = fresh_key("route");
            let s = prepared(&client, sql).await?;
            client.query_one(&s, &[&PROXY_SCOPE, &key]).await?;
            Ok(())
        })
    })
}

/// The proxy's side beside partition 0's, at each client count; then each partition's
/// share of the proxy's keys.
pub async fn measure(proxy: &Proxy, plan: Plan, clients: &[usize]) -> BenchResult<Measured> {
    let mut rows = Vec::new();
    for &n in clients {
        let plan = Plan { clients: n, ..plan };
        let (ours, baseline) = compare_across(
            &proxy.dsn,
            &proxy.partitions[0],
            plan,
            claim_complete(PROXY_SCOPE),
            claim_complete(DIRECT_SCOPE),
        )
        .await?;
        let row = Row {
            workload: format!(
                "claim + complete, {} partition(s), {n} client(s)",
                proxy.partitions.len()
            ),
            ours_name: "through the proxy".into(),
            baseline_name: "partition 0 directly".into(),
            ours,
            baseline,
            goal: None,
        };
        rows.push((n, row));
    }
    let mut distribution = Vec::new();
    for p in &proxy.partitions {
        let c = connect(p).await?;
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM idempotency.records WHERE scope = $1",
                &[&PROXY_SCOPE],
            )
            .await?
            .get(0);
        distribution.push(n);
    }
    Ok(Measured {
        backend: proxy.backend,
        partitions: proxy.partitions.len(),
        rows,
        distribution,
    })
}

/// Every proxy given, in order; the routing hash on the first one.
pub async fn run(proxy_dsns: &[String], plan: Plan) -> BenchResult<Outcome> {
    if proxy_dsns.is_empty() {
        return Ok(Outcome::Skipped(
            "no `--proxy-dsn` was given: PL/Proxy is installed for PostgreSQL 15 only here \
             (Debian's postgresql-15-plproxy), and scripts/bench.sh makes the proxies on a \
             PostgreSQL 15 cluster when it and the extension are installed there"
                .into(),
        ));
    }
    let mut proxies = Vec::new();
    for dsn in proxy_dsns {
        proxies.push(discover(dsn).await?);
    }
    let mut measured = Vec::new();
    for p in &proxies {
        measured.push(measure(p, plan, &[1, 8]).await?);
    }
    let first = &proxies[0];
    let (ours, baseline) = compare_across(
        &first.dsn,
        &first.dsn,
        Plan { clients: 1, ..plan },
        statement(ROUTE),
        statement(NO_ROUTE),
    )
    .await?;
    let routing = Row {
        workload: "the routing hash alone".into(),
        ours_name: "`idempotency._idem_partition(scope, key)`".into(),
        baseline_name: "`SELECT $1::text, $2::text`".into(),
        ours,
        baseline,
        goal: None,
    };
    Ok(Outcome::Measured(Report {
        server: first.server.clone(),
        measured,
        routing,
    }))
}
