//! N new calls claimed and completed as one batch (`idem_begin_batch` + `idem_complete_batch`:
//! two round trips) beside the same N calls made one by one (`idem_begin` + `idem_complete`
//! each: 2N round trips), through the delay forwarder at added round-trip times, in one
//! run. Both sides go through the forwarder, 0 ms included, so they pay the same hop.
//!
//! One operation is N calls on either side: the throughput reported is calls per second
//! (operations times N), the latencies are those of the N calls together.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::Row;
use crate::delay::DelayProxy;
use crate::harness::{compare, fresh_key, prepared, BenchResult, Op, Plan, Stats};

const BEGIN: &str = "SELECT fence FROM idem_begin($1, $2)";
const COMPLETE: &str = "SELECT state FROM idem_complete($1, $2, $3, '{\"ok\": true}')";
const BEGIN_BATCH: &str = "SELECT fence FROM idem_begin_batch($1, $2) ORDER BY item";
const COMPLETE_BATCH: &str = "SELECT state FROM idem_complete_batch($1, $2, $3, \
     array_fill('{\"ok\": true}'::jsonb, ARRAY[cardinality($2::text[])]))";
const SCOPE: &str = "bench_batch";

/// One measured setting.
pub struct Measured {
    /// "extension" or "portable SQL".
    pub backend: &'static str,
    pub rtt: Duration,
    pub items: usize,
    pub row: Row,
}

fn batch_op(items: usize) -> Op {
    Arc::new(move |c, n| {
        Box::pin(async move {
            let keys: Vec<String> = (0..items)
                .map(|i| fresh_key(&format!("b{n}-{i}")))
                .collect();
            let begin = prepared(&c, BEGIN_BATCH).await?;
            let fences: Vec<i64> = c
                .query(&begin, &[&SCOPE, &keys])
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
            let complete = prepared(&c, COMPLETE_BATCH).await?;
            c.query(&complete, &[&SCOPE, &keys, &fences]).await?;
            Ok(())
        })
    })
}

fn singles_op(items: usize) -> Op {
    Arc::new(move |c, n| {
        Box::pin(async move {
            let begin = prepared(&c, BEGIN).await?;
            let complete = prepared(&c, COMPLETE).await?;
            for i in 0..items {
                let key = fresh_key(&format!("s{n}-{i}"));
                let fence: i64 = c.query_one(&begin, &[&SCOPE, &key]).await?.get(0);
                c.query_one(&complete, &[&SCOPE, &key, &fence]).await?;
            }
            Ok(())
        })
    })
}

/// `dsn` is the database's conninfo; its host and port are overridden (a later keyword
/// wins) by the forwarder's, in front of `upstream` (the server's TCP address).
pub async fn run(
    dsn: &str,
    backend: &'static str,
    upstream: SocketAddr,
    plan: Plan,
    rtts: &[Duration],
    sizes: &[usize],
) -> BenchResult<Vec<Measured>> {
    let mut out = Vec::new();
    for &rtt in rtts {
        let forwarder = DelayProxy::start(upstream, rtt)?;
        let through = format!("{dsn} host=127.0.0.1 port={}", forwarder.port());
        for &items in sizes {
            let (ours, baseline) =
                compare(&through, plan, batch_op(items), singles_op(items)).await?;
            let per_call = |s: Stats| Stats {
                ops: s.ops * items as u64,
                ..s
            };
            out.push(Measured {
                backend,
                rtt,
                items,
                row: Row {
                    workload: format!(
                        "{backend}: {items} new calls, {} ms added round trip",
                        rtt.as_secs_f64() * 1e3
                    ),
                    ours_name: format!("`idem_begin_batch` + `idem_complete_batch` of {items}"),
                    baseline_name: format!("{items} x (`idem_begin` + `idem_complete`)"),
                    ours: per_call(ours),
                    baseline: per_call(baseline),
                    goal: None,
                },
            });
        }
    }
    Ok(out)
}
