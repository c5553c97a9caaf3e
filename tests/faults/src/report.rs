//! What each scenario reports for docs/reliability.md: trials, faults injected, operations
//! whose outcome was unknown, and violations of each invariant. `scripts/faults.sh` sets
//! `PGIDEM_FAULT_REPORT` (a file the lines are appended to) and `PGIDEM_FAULT_SCALE` (how
//! many times the test command's trial counts a full run makes).

use std::collections::BTreeMap;
use std::io::Write;

use crate::check::Violation;
use crate::crash_server::{backend_name, connect_when_up, major_version};
use crate::history::{Outcome, Run};

/// How many trials to run: the test command's count, times `PGIDEM_FAULT_SCALE` in a full
/// run.
pub fn trials(in_test_command: usize) -> usize {
    let scale = std::env::var("PGIDEM_FAULT_SCALE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    in_test_command * scale
}

/// The figures of one scenario on one backend, summed over its trials.
#[derive(Debug, Default)]
pub struct Tally {
    pub scenario: String,
    pub trials: usize,
    pub faults: usize,
    pub operations: usize,
    pub indeterminate: usize,
    /// Violations by invariant (I1..I6).
    pub violations: BTreeMap<String, usize>,
    /// Trials that had a record monitor: only they are checked against I5 (the expiry).
    pub monitored: usize,
    /// Calls taken over from a holder whose lease lapsed (claims that recovered): what
    /// most faults must lead to, and what the tests assert happened.
    pub takeovers: usize,
}

/// The calls of `run` taken over from a holder whose lease lapsed.
pub fn takeovers(run: &Run) -> usize {
    run.events
        .iter()
        .filter(|e| {
            matches!(
                e.outcome,
                Outcome::Claimed {
                    recovered: true,
                    ..
                }
            )
        })
        .count()
}

impl Tally {
    pub fn new(scenario: &str) -> Tally {
        Tally {
            scenario: scenario.to_string(),
            ..Tally::default()
        }
    }

    /// Adds one trial: its run, how many faults it injected, and what the checker found.
    pub fn add(&mut self, run: &Run, faults: usize, violations: &[Violation]) {
        self.trials += 1;
        self.faults += faults;
        self.operations += run.events.len();
        self.indeterminate += run.events.iter().filter(|e| e.is_indeterminate()).count();
        self.monitored += usize::from(run.observed.is_some());
        self.takeovers += takeovers(run);
        for v in violations {
            *self
                .violations
                .entry(format!("{:?}", v.invariant))
                .or_default() += 1;
        }
    }

    /// Adds one trial that has no history for the checker (calls through the Rust client's
    /// dispatcher, whose store operations are counted rather than recorded one by one): how
    /// many store operations it made, how many of them had an unknown outcome, the faults it
    /// injected, and the violations its own checks found.
    pub fn add_counted(
        &mut self,
        operations: usize,
        indeterminate: usize,
        faults: usize,
        violations: &[Violation],
    ) {
        self.trials += 1;
        self.faults += faults;
        self.operations += operations;
        self.indeterminate += indeterminate;
        for v in violations {
            *self
                .violations
                .entry(format!("{:?}", v.invariant))
                .or_default() += 1;
        }
    }

    /// The end of a scenario's test on the server at `server_dsn`: prints the tally, with
    /// `besides` (what the test counted on its own, if anything), and appends its report
    /// line for the backend under test and the server's major version (waiting for the
    /// server if a fault left it restarting).
    pub async fn close(&self, server_dsn: &str, besides: &str) {
        if besides.is_empty() {
            eprintln!("{self:?}");
        } else {
            eprintln!("{self:?}; {besides}");
        }
        let version = major_version(&connect_when_up(server_dsn).await).await;
        self.write(backend_name(), &version);
    }

    /// Asserts that the faults reached the clients: some operation's outcome was unknown.
    pub fn assert_unknown_outcomes(&self) {
        assert!(self.indeterminate > 0, "no outcome was unknown: {self:?}");
    }

    /// Asserts that some call was taken over once its holder's lease lapsed.
    pub fn assert_takeovers(&self) {
        assert!(self.takeovers > 0, "no call was taken over: {self:?}");
    }

    /// Appends the tally to the report file, when a full run asked for one. One line:
    /// scenario, backend, server version, trials, faults, operations, indeterminate, then
    /// I1..I6 counts; I5 is `-` when no trial had a record monitor (nothing checked it).
    pub fn write(&self, backend: &str, server_version: &str) {
        let Ok(path) = std::env::var("PGIDEM_FAULT_REPORT") else {
            return;
        };
        let counts: Vec<String> = ["I1", "I2", "I3", "I4", "I5", "I6"]
            .iter()
            .map(|i| match self.violations.get(*i).copied().unwrap_or(0) {
                0 if *i == "I5" && self.monitored == 0 => "-".to_string(),
                n => n.to_string(),
            })
            .collect();
        let line = format!(
            "{}\t{backend}\t{server_version}\t{}\t{}\t{}\t{}\t{}\n",
            self.scenario,
            self.trials,
            self.faults,
            self.operations,
            self.indeterminate,
            counts.join("\t")
        );
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot append to {path}: {e}"));
        f.write_all(line.as_bytes())
            .unwrap_or_else(|e| panic!("cannot append to {path}: {e}"));
    }
}
