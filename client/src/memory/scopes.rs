//! What `MemoryStore` keeps per scope beside the records: the estimate of a call's
//! claim-to-completion time that `retry_after` is computed from (by pg_idempotency_protocol::decide,
//! under protocol/src/estimate.rs; in microseconds, as the extension keeps it), and the
//! outcome counters that `metrics` shows (counted where the extension counts them: one per
//! `begin`, by its answer).

use std::collections::HashMap;
use std::time::SystemTime;

use pg_idempotency_protocol::decide::Time;
use pg_idempotency_protocol::estimate;

use crate::error::{ErrorKind, Result};
use crate::types::{Begin, OutcomeCounts};

#[derive(Default)]
pub(crate) struct ScopeFigures {
    /// Microseconds; None until the scope's first completed call.
    pub estimate_us: Option<u64>,
    pub counts: OutcomeCounts,
}

#[derive(Default)]
pub(crate) struct Scopes(HashMap<String, ScopeFigures>);

impl Scopes {
    /// Counts one `begin`'s answer; errors other than a mismatch are not counted.
    pub fn count(&mut self, scope: &str, answer: &Result<Begin>) {
        let counts = &mut self.0.entry(scope.to_string()).or_default().counts;
        match answer {
            Ok(Begin::Claimed(_)) => counts.claimed += 1,
            Ok(Begin::Replay(_)) => counts.replay += 1,
            Ok(Begin::InProgress(_)) => counts.in_progress += 1,
            Err(e) if e.kind == ErrorKind::Mismatch => counts.mismatch += 1,
            Err(_) => {}
        }
    }

    /// A claimed attempt completed (succeeded, failed, or an uncached failure): one sample.
    pub fn sample(&mut self, scope: &str, claimed_at: SystemTime, completed_at: SystemTime) {
        let figures = self.0.entry(scope.to_string()).or_default();
        let sample = completed_at.micros_since(claimed_at);
        figures.estimate_us = Some(estimate::next_estimate(figures.estimate_us, sample));
    }

    /// The scope's estimate of a call's claim-to-completion time, if it has one.
    pub fn estimate_us(&self, scope: &str) -> Option<u64> {
        self.0.get(scope).and_then(|f| f.estimate_us)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &ScopeFigures)> {
        self.0.iter()
    }
}
