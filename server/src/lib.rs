//! The receiving side of `Idempotency-Key`: a tower layer for HTTP services whose callers
//! retry, over pg_idempotency's SQL API (through the client's `PgStore`), so that a
//! retried request does not repeat its side effect.
//!
//! The behaviour, case by case, is the table in docs/http-layer.md.

pub mod fingerprint;
pub mod key;
pub mod problem;
pub mod stored;

mod answer;
mod body;
mod claim;
mod layer;
mod outcome;
mod rule;
mod run;
mod scope;
mod service;

pub use body::{RequestBody, ResponseBody};
pub use claim::Claim;
pub use layer::{IdempotencyLayer, ScopeFn};
pub use outcome::{fate, Fate, Why};
pub use rule::{ClientErrors, Presence, Rule};
pub use scope::Scope;
pub use service::IdempotencyService;
