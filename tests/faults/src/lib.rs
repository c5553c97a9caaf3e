//! The fault-injection suite: client tasks call pg_idempotency over a set of keys while
//! faults are injected, every operation is recorded in a history, each call's side effect
//! is written to a ledger that refuses stale fences, and after the run the history, the
//! ledger and the stored records are checked against the product's invariants (I1-I6 in
//! docs/reliability.md).

pub mod after_failover;
pub mod check;
pub mod check_expiry;
pub mod check_kept;
pub mod client_calls;
pub mod client_process;
pub mod clock;
pub mod crash_server;
pub mod fake_clock;
pub mod history;
pub mod ledger;
pub mod lines;
pub mod monitor;
pub mod proxy;
pub mod replica;
pub mod report;
pub mod run;
pub mod rust_client;
pub mod violation;
