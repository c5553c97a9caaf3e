//! The receiving side of `Idempotency-Key`: a tower layer for HTTP services whose callers
//! retry, over pg_idempotency's SQL API (through the client's `PgStore`), so that a
//! retried request does not repeat its side effect.
//!
//! The behaviour, case by case, is the table in docs/http-layer.md.

pub mod fingerprint;
pub mod headers;
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
mod settings;

pub use body::{RequestBody, ResponseBody};
pub use claim::RequestClaim;
pub use headers::ReplayHeaders;
/// The name of [`RequestClaim`] until 0.5.0, beside the client's `pg_idempotency_client::Claim`
/// (a store's answer to `begin`), which holds something else: kept so that handlers written
/// against 0.5.0 build, with a warning that names the new one.
#[deprecated(
    note = "renamed RequestClaim (pg_idempotency_client::Claim is the client's begin answer)"
)]
pub type Claim = RequestClaim;
pub use layer::IdempotencyLayer;
pub use outcome::{fate, Fate, Why};
pub use rule::{ClientErrors, Presence, Rule};
pub use scope::{Scope, ScopeFn};
pub use service::IdempotencyService;
