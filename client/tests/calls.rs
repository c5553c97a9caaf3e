//! The client's calls over real stores, one test binary (each topic a module of calls/):
//!
//! - calls/dispatcher.rs: the tool dispatcher over every store: a side effect runs once
//!   however often the call is repeated
//! - calls/holder.rs: what becomes of a claimed call: its result recorded although the
//!   store blinks, a lost lease, a takeover of an attempt that may have acted
//! - calls/joined_wait.rs: a call joining its live holder waits only as its store's gate
//!   admits
//! - calls/exactly_once.rs: the claim, the tool's outbox row and the completion commit or
//!   roll back together
//! - calls/precedence.rs: which setting governs a call: the call's own, the tool's, its
//!   toolkit's, the scope's policy in the database, the server's settings
//! - calls/toolkit.rs: a tool's settings replace its toolkit's whole (field by field on
//!   request), what the governing settings leave unset is not sent
//! - calls/example.rs: the Java framework's IdempotencyExample (client/examples/
//!   idempotency_example/) does what it shows, on PgStore and a local mail provider
//! - calls/reads.rs: read-only tools are deduplicated by their own settings only
//! - calls/typed.rs: typed tools (`#[pg_idempotency_client::tool]`): run once, bad input refused
//!   before any claim, listed with their schema
//! - calls/unstorable.rs: what no store can hold, refused alike before anything is sent
//! - calls/default_store.rs: the default MemoryStore and its one warning
//! - calls/pg_store.rs: what only a store over PostgreSQL has
//! - calls/api_schema.rs: PgStore calls the API in its schema only: a hostile schema first
//!   on the search_path captures nothing, and a schema of another name works
//! - calls/hostile_input.rs: input the SQL API cannot hold (NUL, U+0000, a body that is
//!   not UTF-8): a typed error, no panic, nothing stored
//!
//! The stores' shared behaviour is parity.rs; the web executor is web.rs.

mod common;
mod toolkit_upstream;

// The Java framework's example program's pieces (calls/example.rs runs them).
#[path = "../examples/idempotency_example/example.rs"]
mod idempotency_example;
#[path = "../examples/idempotency_example/mail_service.rs"]
mod mail_service;

mod calls {
    pub mod api_schema;
    pub mod default_store;
    pub mod dispatcher;
    pub mod exactly_once;
    pub mod example;
    pub mod holder;
    pub mod hostile_input;
    pub mod joined_wait;
    pub mod pg_store;
    pub mod precedence;
    pub mod reads;
    pub mod toolkit;
    pub mod typed;
    pub mod unstorable;
}
