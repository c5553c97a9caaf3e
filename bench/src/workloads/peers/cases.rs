//! The cases every row of the peers workload runs, the same in every language, and what a
//! case measures. The drivers in bench/peers/ take them as JSON and answer in the same
//! terms.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{stats, Stats};

/// Completed keys a replay case cycles over.
pub const REPLAY_KEYS: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Case {
    /// Claim + execute a no-op + complete of a new key, one call after another.
    New {
        warmup: Duration,
        duration: Duration,
    },
    /// A call of a completed key, one after another.
    Replay {
        warmup: Duration,
        duration: Duration,
    },
    /// `concurrency` duplicates of one new key released together by a barrier, `rounds`
    /// times, each with a new key.
    Hot { concurrency: usize, rounds: usize },
    /// A call whose body fails, then `retries` retries of it, for `rounds` keys.
    Failure { rounds: usize, retries: usize },
}

impl Case {
    pub fn concurrency(&self) -> usize {
        match self {
            Case::Hot { concurrency, .. } => *concurrency,
            _ => 1,
        }
    }

    /// The driver's spelling.
    pub fn spec(&self) -> Value {
        match *self {
            Case::New { warmup, duration } => json!({"case": "new",
                "warmup_s": warmup.as_secs_f64(), "duration_s": duration.as_secs_f64()}),
            Case::Replay { warmup, duration } => json!({"case": "replay",
                "warmup_s": warmup.as_secs_f64(), "duration_s": duration.as_secs_f64()}),
            Case::Hot {
                concurrency,
                rounds,
            } => json!({"case": "hot", "concurrency": concurrency, "rounds": rounds}),
            Case::Failure { rounds, retries } => {
                json!({"case": "failure", "rounds": rounds, "retries": retries})
            }
        }
    }
}

/// One case of one row.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Throughput and latency of the timed calls: every call of New and Replay, each
    /// duplicate of Hot, each retry of Failure.
    pub stats: Stats,
    /// How many times the function body ran, counted in the body.
    pub executions: u64,
    /// New keys the case used (for Hot and Failure: one per round).
    pub keys: u64,
    /// What the duplicates or retries were told (ok, replay, in_progress, failed, errors).
    pub outcomes: BTreeMap<String, u64>,
    /// The timed calls' latencies and seconds, kept to merge rounds (`stats` is of them).
    pub latencies: Vec<Duration>,
    pub seconds: f64,
}

impl Measured {
    pub fn new(
        latencies: Vec<Duration>,
        seconds: f64,
        executions: u64,
        keys: u64,
        outcomes: BTreeMap<String, u64>,
    ) -> Measured {
        Measured {
            stats: stats(latencies.clone(), seconds),
            executions,
            keys,
            outcomes,
            latencies,
            seconds,
        }
    }

    /// Adds a later round of the same case.
    pub fn merge(&mut self, other: Measured) {
        self.latencies.extend(other.latencies);
        self.seconds += other.seconds;
        self.executions += other.executions;
        self.keys += other.keys;
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_insert(0) += v;
        }
        self.stats = stats(self.latencies.clone(), self.seconds);
    }
}

/// Where a row's store listens: the delay forwarder's address, never the server's own.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    /// PostgreSQL only.
    pub dbname: String,
    pub user: String,
}

impl Target {
    pub fn pg_dsn(&self) -> String {
        format!(
            "host={} port={} dbname={} user={}",
            self.host, self.port, self.dbname, self.user
        )
    }
}

/// Keys never used before by any row or run: a uuid-like suffix from the clock and a
/// counter.
pub fn fresh(prefix: &str) -> String {
    crate::harness::fresh_key(prefix)
}
