//! The workloads: each is ours beside its baseline, with a goal for the ratio.

pub mod batch;
pub mod calls;
pub mod churn;
pub mod client_overhead;
pub mod counts;
pub mod growth;
pub mod hashing;
pub mod hot_key;
pub mod http;
pub mod mcp;
pub mod mcp_flood;
pub mod peers;
pub mod sharding;

use crate::harness::Stats;

/// One line of the report.
pub struct Row {
    pub workload: String,
    pub ours_name: String,
    pub baseline_name: String,
    pub ours: Stats,
    pub baseline: Stats,
    /// The least acceptable ours / baseline throughput ratio, where there is one.
    pub goal: Option<f64>,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        let b = self.baseline.ops_per_sec();
        if b > 0.0 {
            self.ours.ops_per_sec() / b
        } else {
            0.0
        }
    }
}
