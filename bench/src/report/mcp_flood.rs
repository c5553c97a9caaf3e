//! The MCP proxy's limits under a flood: another principal's latency with and without it.

use std::fmt::Write;

use super::{cpu, ms};
use crate::workloads::mcp_flood::{Flood, FloodPlan, Outcome};

pub fn section(outcome: &Outcome, plan: FloodPlan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## MCP proxy under a flood of waiting duplicates\n");
    let f = match outcome {
        Outcome::Skipped(reason) => {
            let _ = writeln!(s, "Skipped: {reason}.");
            return s;
        }
        Outcome::Measured(f) => f,
    };
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    let _ = writeln!(s, "One `pg-idempotency-mcp` (the {profile} binary; `[database] pool_size = {}`, the `[limits]` defaults: 4 waiting duplicates per principal, 2 connections kept from waiting duplicates, a heartbeat pool of 2) over Streamable HTTP, in front of the counting server over HTTP ({}). Principal B calls `send_email` with new arguments, one call after another: {} warm-up calls, then {} timed calls per side in {} rounds. In a flooded round principal A holds one call in the server and sends {} duplicates of it at once over four sessions, each sent again once answered: after the answer's `retryAfterMs` (at most 2 s: clients that do as they are told), or 20 ms after any answer (a hostile crowd). B's calls are timed once the crowd has had an `in_progress` answer, and the held call is let go after them; quiet and the two flooded rounds alternate. The ratio is flooded / quiet at the same percentile (1.00: the flood costs B nothing). The crowds were answered {} times `in_progress` and {} times with the replay; none of their duplicates ran.\n", plan.pool_size, f.python, plan.warmup, plan.calls, plan.rounds, plan.crowd, f.in_progress, f.replays);
    let _ = writeln!(s, "- machine: {}\n", cpu());
    let _ = writeln!(
        s,
        "| B's calls | calls | p50 ms (flooded / quiet) | p99 ms (flooded / quiet) |"
    );
    let _ = writeln!(s, "|---|---|---|---|");
    let _ = writeln!(
        s,
        "| quiet | {} | {} | {} |",
        f.quiet.ops,
        ms(f.quiet.p50),
        ms(f.quiet.p99)
    );
    for (name, flooded) in [
        ("under A's crowd, retrying after `retryAfterMs`", &f.polite),
        ("under A's crowd, retrying every 20 ms", &f.flooded),
    ] {
        let _ = writeln!(
            s,
            "| {name} | {} | {} ({:.2}x) | {} ({:.2}x) |",
            flooded.ops,
            ms(flooded.p50),
            Flood::ratio(flooded.p50, f.quiet.p50),
            ms(flooded.p99),
            Flood::ratio(flooded.p99, f.quiet.p99)
        );
    }
    s
}
