//! What the outcome counts cost (docs/decisions.md, "Counts that never fold"): the scrape
//! (`idem_metrics()`) with many scopes and records, beside plain counts of the tables it
//! reads; and the hot path (`idem_begin`, claims and replays) with counting on beside
//! counting off (`pg_idempotency.count_outcomes`), on the extension and on the portable
//! variant: a new key's claim, and a duplicate of a running claim (`in_progress`, an
//! answer that writes no record). Every session of the hot path calls in one scope, so sessions that shared a
//! counter row would queue on it.

use std::sync::Arc;
use std::time::Instant;

use crate::harness::{compare_across, connect, fresh_key, prepared, BenchResult, Op, Plan, Stats};

pub struct CountsReport {
    pub scopes: i64,
    pub records: i64,
    pub load_seconds: f64,
    /// (what, ours, baseline, ours' name, baseline's name)
    pub scrape: Vec<(String, Stats, Stats, String, String)>,
    /// (backend, call, counting on, counting off)
    pub hot: Vec<(String, String, Stats, Stats)>,
    pub clients: usize,
}

/// `records` completed records spread over `scopes` scopes, and the counts of each scope
/// (one row per scope, as one backend writes them), the caller as their owner.
async fn load(dsn: &str, scopes: i64, records: i64) -> BenchResult<()> {
    let c = connect(dsn).await?;
    c.batch_execute("TRUNCATE idempotency.records, idempotency.counts")
        .await?;
    let mut start = 0;
    while start < records {
        let end = (start + 1_000_000).min(records);
        c.execute(
            "INSERT INTO idempotency.records (scope, key, state, fence, attempt, upstream_key, \
                 response, created_at, completed_at, expires_at, ttl, owner) \
             SELECT 'cnt/' || (g % $3), md5(g::text), 'succeeded', nextval('idempotency.fence_seq'), 1, \
                 gen_random_uuid(), '{\"ok\": true}', now(), now(), now() + interval '1 day', \
                 interval '1 day', current_user::regrole \
             FROM generate_series($1::bigint, $2::bigint - 1) g",
            &[&start, &end, &scopes],
        )
        .await?;
        start = end;
    }
    c.execute(
        "INSERT INTO idempotency.counts (owner, scope, slot, claimed, replay) \
         SELECT current_user::regrole, 'cnt/' || g, 1, 100, 1000 FROM generate_series(0, $1::bigint - 1) g",
        &[&scopes],
    )
    .await?;
    c.batch_execute("VACUUM ANALYZE idempotency.records")
        .await?;
    c.batch_execute("VACUUM ANALYZE idempotency.counts").await?;
    Ok(())
}

fn query(sql: &'static str) -> Op {
    Arc::new(move |client, _| {
        Box::pin(async move {
            let s = prepared(&client, sql).await?;
            client.query(&s, &[]).await?;
            Ok(())
        })
    })
}

/// `idem_begin` in one scope with counting set to `on` (each call sets it, both sides
/// alike): a new key (claim) or the one running key (in_progress).
fn begin(on: &'static str, claim: bool) -> Op {
    Arc::new(move |client, _| {
        Box::pin(async move {
            let key = if claim {
                fresh_key("cnt-hot")
            } else {
                "stored".to_string()
            };
            let s = prepared(
                &client,
                "SELECT b.outcome FROM (SELECT pg_catalog.set_config('pg_idempotency.count_outcomes', $2, false) AS v) AS s, \
                     LATERAL idem_begin('cnt-hot' || left(s.v, 0), $1) AS b",
            )
            .await?;
            client.query_one(&s, &[&key, &on]).await?;
            Ok(())
        })
    })
}

pub async fn run(
    dsn: &str,
    portable_dsn: Option<&str>,
    plan: Plan,
    hot_plan: Plan,
    scopes: i64,
    records: i64,
) -> BenchResult<CountsReport> {
    let t = Instant::now();
    load(dsn, scopes, records).await?;
    let load_seconds = t.elapsed().as_secs_f64();
    let mut scrape = Vec::new();
    for (what, ours, ours_name, base, base_name) in [
        (
            "the scrape beside a plain count of the counts' table",
            "SELECT * FROM idem_metrics()",
            "`idem_metrics()`",
            "SELECT count(*) FROM idempotency.counts",
            "`count(*)` of `counts`",
        ),
        (
            "the scrape beside a plain count of the records",
            "SELECT * FROM idem_metrics()",
            "`idem_metrics()`",
            "SELECT count(*) FROM idempotency.records",
            "`count(*)` of `records`",
        ),
        (
            "the counts' part of the scrape beside a plain count of their table",
            "SELECT owner, scope, sum(claimed), sum(replay), sum(in_progress), sum(mismatch), \
                    sum(refused), sum(unrecorded), sum(outcome_unknown) \
             FROM idempotency.counts GROUP BY owner, scope",
            "counts summed per owner and scope",
            "SELECT count(*) FROM idempotency.counts",
            "`count(*)` of `counts`",
        ),
    ] {
        let (o, b) = compare_across(dsn, dsn, plan, query(ours), query(base)).await?;
        scrape.push((
            what.to_string(),
            o,
            b,
            ours_name.to_string(),
            base_name.to_string(),
        ));
    }
    // Give the space back before the hot path.
    connect(dsn)
        .await?
        .batch_execute("TRUNCATE idempotency.records, idempotency.counts")
        .await?;

    let mut hot = Vec::new();
    let mut backends = vec![("extension", dsn)];
    if let Some(p) = portable_dsn {
        backends.push(("portable", p));
    }
    for (backend, d) in backends {
        let c = connect(d).await?;
        c.batch_execute("SELECT idem_begin('cnt-hot', 'stored')")
            .await?;
        for (call, claim) in [
            ("new key (claim)", true),
            ("running key (in_progress)", false),
        ] {
            let (on, off) =
                compare_across(d, d, hot_plan, begin("1", claim), begin("0", claim)).await?;
            hot.push((backend.to_string(), call.to_string(), on, off));
        }
        c.batch_execute(
            "DELETE FROM idempotency.records WHERE scope = 'cnt-hot'; \
             DELETE FROM idempotency.counts WHERE scope = 'cnt-hot'",
        )
        .await?;
    }
    Ok(CountsReport {
        scopes,
        records,
        load_seconds,
        scrape,
        hot,
        clients: hot_plan.clients,
    })
}
