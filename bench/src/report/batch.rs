//! The batch section: N calls as one batch beside the same N calls one by one, per added
//! round-trip time.

use std::fmt::Write;

use super::ms;
use crate::harness::Plan;
use crate::workloads::batch::Measured;

pub fn batch(measured: &[Measured], plan: Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Batches\n");
    let _ = writeln!(
        s,
        "N new calls claimed and completed as one batch (`idem_begin_batch` + `idem_complete_batch`: two round trips) beside the same N calls one by one (`idem_begin` + `idem_complete` each: 2N round trips), on each backend, 1 client, through the delay forwarder at each added round-trip time (both sides, 0 ms included, so they pay the same hop); alternating, {} round(s) of {:?} each after a {:?} warm-up. Calls/s counts calls (N per operation); p50 and p99 are those of the N calls together. The ratio is batch / one by one in calls per second. With fsync on, each statement's commit waits for its WAL flush: a batch's N claims share one flush and its N completions another, where one by one pays 2N.\n",
        plan.rounds, plan.duration, plan.warmup
    );
    let _ = writeln!(s, "| backend | N | added RTT | batch: calls/s | p50 ms | p99 ms | one by one: calls/s | p50 ms | p99 ms | round trips | ratio |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for m in measured {
        let r = &m.row;
        let _ = writeln!(
            s,
            "| {} | {} | {} ms | {:.1} | {} | {} | {:.1} | {} | {} | 2 vs {} | {:.2}x |",
            m.backend,
            m.items,
            m.rtt.as_secs_f64() * 1e3,
            r.ours.ops_per_sec(),
            ms(r.ours.p50),
            ms(r.ours.p99),
            r.baseline.ops_per_sec(),
            ms(r.baseline.p50),
            ms(r.baseline.p99),
            2 * m.items,
            r.ratio()
        );
    }
    s
}
