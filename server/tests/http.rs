//! The layer in front of a real axum server on 127.0.0.1, over `PgStore` on the database
//! under test (`PGIDEM_DSN`, with the backend `PGIDEM_BACKEND` names installed). Each test
//! is a row of the behaviour table in docs/http-layer.md.
//!
//! - http/running.rs: duplicates while the handler runs, a client that goes away, a panic
//! - http/replay.rs: answers replayed byte for byte
//! - http/admission.rs: which requests are keyed, keys, scopes, bodies, mismatches
//! - http/fates.rs: which answers are remembered and which released
//! - http/transactional.rs: a handler that completes inside its own transaction

mod common;

mod http {
    pub mod admission;
    pub mod fates;
    pub mod replay;
    pub mod running;
    pub mod transactional;
}
