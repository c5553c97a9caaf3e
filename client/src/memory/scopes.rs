//! What `MemoryStore` keeps per scope beside the records: the estimate of a call's
//! claim-to-completion time that `retry_after` is computed from
//! (protocol/src/estimate.rs), and the outcome counters that `metrics` shows (counted where
//! the extension counts them: one per `begin`, by its answer).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use protocol::estimate;

use crate::error::{ErrorKind, Result};
use crate::types::{Begin, OutcomeCounts};

#[derive(Default)]
pub(crate) struct ScopeFigures {
    /// Milliseconds; None until the scope's first completed call.
    pub estimate_ms: Option<u64>,
    pub counts: OutcomeCounts,
}

#[derive(Default)]
pub(crate) struct Scopes(HashMap<String, ScopeFigures>);

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// `later - earlier`, zero when the clock stepped back between them.
fn since(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

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
        let sample = ms(since(claimed_at, completed_at));
        figures.estimate_ms = Some(estimate::next_estimate(figures.estimate_ms, sample));
    }

    /// What a duplicate is told while the attempt claimed at `claimed_at` runs.
    pub fn retry_after(
        &self,
        scope: &str,
        claimed_at: SystemTime,
        lease_until: SystemTime,
        now: SystemTime,
    ) -> Duration {
        let estimate_ms = self.0.get(scope).and_then(|f| f.estimate_ms);
        Duration::from_millis(estimate::retry_after_ms(
            estimate_ms,
            ms(since(claimed_at, now)),
            ms(since(now, lease_until)),
        ))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &ScopeFigures)> {
        self.0.iter()
    }
}
