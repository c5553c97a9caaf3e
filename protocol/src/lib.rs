//! What every part of pg_idempotency agrees on, said once: the SQL API's functions and
//! their signatures, its SQLSTATEs, the words of its policies and states, its settings
//! with their limits and defaults, and the record's state machine with its refusals.
//!
//! Both backends' `CREATE FUNCTION` text (rendered by the repository's `cargo xtask
//! render-sql`) and the extension's typed argument structs come from
//! [`functions::FUNCTIONS`]; the client maps SQLSTATEs and words through
//! the same types; the extension and `MemoryStore` take every decision about a record
//! through [`decide`] and word its refusals through [`refusal`]; the PL/pgSQL variant's
//! bodies are held to them by the behaviour suite. Nothing here depends on PostgreSQL or on
//! an async runtime.

pub mod decide;
pub mod errors;
pub mod estimate;
pub mod functions;
pub mod refusal;
pub mod settings;
pub mod words;

pub use errors::ErrorCode;
pub use words::{
    BatchCompletion, BatchOutcome, Completion, OnCacheHit, OnMismatch, Outcome, State,
};
