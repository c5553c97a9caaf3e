//! The hot paths of a call, each beside the least any durable layer pays for the same
//! effect, on a table of the same shape (`bench_floor`: the records table's columns, key,
//! fillfactor and storage settings):
//!
//! - claim + complete of a new key: `idem_begin` + `idem_complete` against a plain
//!   `INSERT ... ON CONFLICT DO NOTHING` and an `UPDATE` by primary key, two autocommit
//!   statements each;
//! - replay of a completed key: `idem_begin` against a `SELECT` by primary key;
//! - what people write by hand: ours against a client-side SELECT, then INSERT, then
//!   UPDATE.

use std::sync::Arc;

use super::Row;
use crate::harness::{
    compare, compare_across, connect, fresh_key, prepared, BenchResult, Op, Plan,
};

const FLOOR_TABLE: &str = "DROP TABLE IF EXISTS bench_floor; \
    CREATE TABLE bench_floor (LIKE idempotency.records INCLUDING ALL) \
    WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02, \
          autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)";

const BEGIN: &str = "SELECT fence FROM idem_begin($1, $2)";
const COMPLETE: &str = "SELECT state FROM idem_complete($1, $2, $3, '{\"ok\": true}')";
pub(crate) const FLOOR_INSERT: &str =
    "INSERT INTO bench_floor (scope, key, state, fence, attempt, \
        upstream_key, created_at, lease_until, expires_at, ttl, owner) \
    VALUES ($1, $2, 'in_progress', $3, 1, gen_random_uuid(), now(), now() + interval '1 minute', \
        now() + interval '1 hour', interval '1 hour', current_user::regrole) \
    ON CONFLICT DO NOTHING";
pub(crate) const FLOOR_UPDATE: &str =
    "UPDATE bench_floor SET state = 'succeeded', response = '{\"ok\": true}', \
        completed_at = now(), lease_until = NULL, expires_at = now() + interval '1 hour' \
    WHERE scope = $1 AND key = $2";
pub(crate) const FLOOR_SELECT: &str =
    "SELECT state, response FROM bench_floor WHERE scope = $1 AND key = $2";
const REPLAY_KEYS: u64 = 1000;

/// Creates the floor table (in every database given: the portable comparison uses two).
pub async fn setup(dsns: &[&str]) -> BenchResult<()> {
    for dsn in dsns {
        let c = connect(dsn).await?;
        c.batch_execute(FLOOR_TABLE).await?;
        c.batch_execute("TRUNCATE idempotency.records").await?;
        // Completed keys to replay, on both sides.
        c.execute(
            "SELECT count(idem_complete('replay', 'r' || g, (idem_begin('replay', 'r' || g)).fence, '{\"ok\": true}')) \
             FROM generate_series(0, $1::bigint - 1) g",
            &[&(REPLAY_KEYS as i64)],
        )
        .await?;
        c.execute(
            "INSERT INTO bench_floor SELECT * FROM idempotency.records WHERE scope = 'replay'",
            &[],
        )
        .await?;
        // One statement each: a multi-statement string runs as one transaction.
        c.batch_execute("VACUUM ANALYZE bench_floor").await?;
        c.batch_execute("VACUUM ANALYZE idempotency.records")
            .await?;
    }
    Ok(())
}

pub fn claim_complete() -> Op {
    Arc::new(|client, _| {
        Box::pin(async move {
            let key = fresh_key("cc");
            let begin = prepared(&client, BEGIN).await?;
            let fence: Option<i64> = client.query_one(&begin, &[&"bench", &key]).await?.get(0);
            let complete = prepared(&client, COMPLETE).await?;
            client
                .query_one(&complete, &[&"bench", &key, &fence])
                .await?;
            Ok(())
        })
    })
}

fn floor_insert_update() -> Op {
    Arc::new(|client, n| {
        Box::pin(async move {
            let key = fresh_key("floor");
            let insert = prepared(&client, FLOOR_INSERT).await?;
            client
                .execute(&insert, &[&"bench", &key, &(n as i64)])
                .await?;
            let update = prepared(&client, FLOOR_UPDATE).await?;
            client.execute(&update, &[&"bench", &key]).await?;
            Ok(())
        })
    })
}

pub fn replay() -> Op {
    Arc::new(|client, n| {
        Box::pin(async move {
            let key = format!("r{}", n % REPLAY_KEYS);
            let begin = prepared(&client, BEGIN).await?;
            client.query_one(&begin, &[&"replay", &key]).await?;
            Ok(())
        })
    })
}

fn floor_select() -> Op {
    Arc::new(|client, n| {
        Box::pin(async move {
            let key = format!("r{}", n % REPLAY_KEYS);
            let select = prepared(&client, FLOOR_SELECT).await?;
            client.query_opt(&select, &[&"replay", &key]).await?;
            Ok(())
        })
    })
}

/// SELECT the record; if there is none, INSERT the claim (ON CONFLICT DO NOTHING); do the
/// work; UPDATE it with the result. Three round trips, no fence, no lease, no expiry: what
/// an application without an idempotency layer writes by hand.
fn naive() -> Op {
    Arc::new(|client, n| {
        Box::pin(async move {
            let key = fresh_key("naive");
            let select = prepared(&client, FLOOR_SELECT).await?;
            if client
                .query_opt(&select, &[&"naive", &key])
                .await?
                .is_none()
            {
                let insert = prepared(&client, FLOOR_INSERT).await?;
                client
                    .execute(&insert, &[&"naive", &key, &(n as i64)])
                    .await?;
                let update = prepared(&client, FLOOR_UPDATE).await?;
                client.execute(&update, &[&"naive", &key]).await?;
            }
            Ok(())
        })
    })
}

fn row(
    workload: &str,
    ours: &str,
    baseline: &str,
    stats: (crate::harness::Stats, crate::harness::Stats),
    goal: Option<f64>,
) -> Row {
    Row {
        workload: workload.into(),
        ours_name: ours.into(),
        baseline_name: baseline.into(),
        ours: stats.0,
        baseline: stats.1,
        goal,
    }
}

const OURS_CC: &str = "`idem_begin` + `idem_complete`";
const FLOOR_CC: &str = "`INSERT ... ON CONFLICT DO NOTHING` + `UPDATE` by key";

/// Claim + complete of new keys from 1 and 8 clients; `label` names the server's setting.
pub async fn run_claims(dsn: &str, plan: Plan, label: &str, goal: f64) -> BenchResult<Vec<Row>> {
    let mut rows = Vec::new();
    for clients in [1, 8] {
        let plan = Plan { clients, ..plan };
        let stats = compare(dsn, plan, claim_complete(), floor_insert_update()).await?;
        rows.push(row(
            &format!("claim + complete, new keys, {clients} client(s){label}"),
            OURS_CC,
            FLOOR_CC,
            stats,
            Some(goal),
        ));
    }
    Ok(rows)
}

pub async fn run_replay_and_naive(dsn: &str, plan: Plan) -> BenchResult<Vec<Row>> {
    let replayed = compare(dsn, plan, replay(), floor_select()).await?;
    let by_hand = compare(dsn, plan, claim_complete(), naive()).await?;
    Ok(vec![
        row(
            "replay of a completed key",
            "`idem_begin` on a completed key",
            "`SELECT` by primary key",
            replayed,
            Some(0.9),
        ),
        row(
            "naive client, new keys",
            OURS_CC,
            "client-side `SELECT`, then `INSERT`, then `UPDATE`",
            by_hand,
            None,
        ),
    ])
}

/// The portable SQL variant (ours) beside the extension (baseline), each in its own
/// database of the same server.
pub async fn run_portable(
    portable_dsn: &str,
    extension_dsn: &str,
    plan: Plan,
) -> BenchResult<Vec<Row>> {
    let cc = compare_across(
        portable_dsn,
        extension_dsn,
        plan,
        claim_complete(),
        claim_complete(),
    )
    .await?;
    let rp = compare_across(portable_dsn, extension_dsn, plan, replay(), replay()).await?;
    let hashing: Op = Arc::new(|client, _| {
        Box::pin(async move {
            client
                .query_one(
                    "SELECT sum(octet_length(idem_hash(doc))) FROM bench_docs WHERE size = '1k'",
                    &[],
                )
                .await?;
            Ok(())
        })
    });
    let hs = compare_across(portable_dsn, extension_dsn, plan, hashing.clone(), hashing).await?;
    Ok(vec![
        row(
            "portable variant: claim + complete, new keys",
            "portable SQL",
            "the extension",
            cc,
            None,
        ),
        row(
            "portable variant: replay of a completed key",
            "portable SQL",
            "the extension",
            rp,
            None,
        ),
        row(
            "portable variant: `idem_hash`, 1 KB documents",
            "portable SQL",
            "the extension",
            hs,
            None,
        ),
    ])
}
