//! The receiving side of `Idempotency-Key`: a tower layer for HTTP services whose callers
//! retry, over pg_idempotency's SQL API (through the client's `PgStore`), so that a
//! retried request does not repeat its side effect.

pub mod fingerprint;
pub mod key;
pub mod problem;
pub mod stored;
