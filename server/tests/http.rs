//! The layer in front of a real axum server on 127.0.0.1, over `PgStore` on the database
//! under test (`PGIDEM_DSN`, with the backend `PGIDEM_BACKEND` names installed). Each test
//! is a row of the behaviour table in docs/http-layer.md.
//!
//! - http/running.rs: duplicates while the handler runs, a client that goes away, a panic
//! - http/replay.rs: answers replayed byte for byte
//! - http/attacks.rs: what a replay must not hand on (Set-Cookie, private headers) and what
//!   an answer must not show (the database's words)
//! - http/admission.rs: which requests are keyed, keys, scopes, bodies, mismatches
//! - http/fates.rs: which answers are remembered and which released
//! - http/transactional.rs: a handler that completes inside its own transaction
//! - http/failing_service.rs: a wrapped service's `Err`: the claim released, the error
//!   passed on
//! - http/schema.rs: the store's API in a schema other than public: the layer's calls and
//!   `complete_in` go there
//! - http/store_down.rs: the database stopped mid-run (a server of the test's own)
//! - http/web_executor.rs: the client's `WebExecutor` against a service behind the layer
//! - http/example_service.rs: the example service (server/examples/charges/) answers as
//!   its documentation says

mod common;

mod http {
    pub mod admission;
    pub mod attacks;
    pub mod example_service;
    pub mod failing_service;
    pub mod fates;
    pub mod replay;
    pub mod running;
    pub mod schema;
    pub mod store_down;
    pub mod transactional;
    pub mod web_executor;
}
