//! `idem_hash` against `sha256(convert_to(doc::text, 'UTF8'))`, which does less (no
//! canonical form) and is the floor for hashing a jsonb in SQL. Each operation hashes every
//! document of one size class server-side, so the cost measured is the hashing, not the
//! round trip.

use std::sync::Arc;

use serde_json::{json, Value};

use super::Row;
use crate::harness::{compare, connect, BenchResult, Op, Plan};

/// A document of about `bytes` bytes of JSON text, shaped like a tool call's input: nested
/// objects, strings with non-ASCII text, integers and decimals.
fn document(bytes: usize, seed: u64) -> Value {
    let mut items = Vec::new();
    let mut size = 0;
    let mut i = seed;
    while size < bytes {
        let item = json!({
            "id": i * 7919 % 1_000_003,
            "name": format!("customer {i} — Zürich"),
            "amount": (i % 10_000) as f64 / 100.0 + 0.25,
            "tags": ["retry", "agent", format!("t{}", i % 13)],
            "address": {"street": format!("{i} Main St"), "zip": format!("{:05}", i % 100_000)},
            "active": i.is_multiple_of(2),
        });
        size += item.to_string().len() + 1;
        items.push(item);
        i += 1;
    }
    json!({"tool": "send_email", "seed": seed, "items": items})
}

pub async fn setup(dsn: &str, docs_1k: usize, docs_64k: usize) -> BenchResult<()> {
    let c = connect(dsn).await?;
    c.batch_execute(
        "DROP TABLE IF EXISTS bench_docs; \
         CREATE TABLE bench_docs (size text, id int, doc jsonb, PRIMARY KEY (size, id))",
    )
    .await?;
    for (size, count, bytes) in [("1k", docs_1k, 1024), ("64k", docs_64k, 64 * 1024)] {
        for id in 0..count {
            let doc = document(bytes, id as u64 * 1000).to_string();
            c.execute(
                "INSERT INTO bench_docs VALUES ($1, $2, $3::text::jsonb)",
                &[&size, &(id as i32), &doc],
            )
            .await?;
        }
    }
    c.batch_execute("VACUUM ANALYZE bench_docs").await?;
    Ok(())
}

fn query(sql: &'static str, size: &'static str) -> Op {
    Arc::new(move |client, _| {
        Box::pin(async move {
            client.query_one(sql, &[&size]).await?;
            Ok(())
        })
    })
}

pub async fn run(dsn: &str, plan: Plan) -> BenchResult<Vec<Row>> {
    let mut rows = Vec::new();
    for size in ["1k", "64k"] {
        let ours = query(
            "SELECT sum(octet_length(idem_hash(doc))) FROM bench_docs WHERE size = $1",
            size,
        );
        let baseline = query(
            "SELECT sum(octet_length(sha256(convert_to(doc::text, 'UTF8')))) FROM bench_docs WHERE size = $1",
            size,
        );
        let (o, b) = compare(dsn, plan, ours, baseline).await?;
        rows.push(Row {
            workload: format!(
                "hashing, {} documents (each op: all of one size)",
                size.replace('k', " KB")
            ),
            ours_name: "`idem_hash(doc)`".into(),
            baseline_name: "`sha256(convert_to(doc::text, 'UTF8'))`".into(),
            ours: o,
            baseline: b,
            goal: Some(0.5),
        });
    }
    Ok(rows)
}
