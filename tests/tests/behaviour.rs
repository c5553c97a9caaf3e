//! The SQL API's behaviour, on the backend under test (`PGIDEM_BACKEND`), one module per
//! area (behaviour/<module>.rs), linked as one test binary. The modules run side by side,
//! each in scopes (`scope()`), roles and databases of its own.
//!
//! - batch: idem_begin_batch and idem_complete_batch answer each item as a single call would
//! - bounds: interval bounds that only some PostgreSQL versions can express
//! - canonical: canonical JSON in SQL is byte for byte the canon crate's
//! - claim_token: a repeated idem_begin with its claim_token gets its lost claim back
//! - counts: idem_metrics() counts any number of scopes with no fold, refusals and the
//!   client's marks included; its one bound folds visibly
//! - concurrency: many sessions on one key: exactly one claims, nobody errors
//! - grant_roles: the grant roles own no records: a call made as one is refused (IK006),
//!   and the grants the refusal's hint gives keep each tenant its own key space
//! - identity: the owner of a record is the outer calling role
//! - isolation: each role has its own key space
//! - policy_changes: a changed policy, or a reinstall, reaches every session's next call
//! - retry_after: a duplicate is told the running call's estimated time left
//! - send_email: the product's promise: a tool retried three times sends one email
//! - sqlstates: both backends raise each of the protocol's SQLSTATEs for the same case
//! - unresolved: a record whose outcome is unknown outlives its ttl until an operator
//!   resolves it (audited) or its unresolved bound passes; when a key can be used again
//! - wait: a duplicate waits for a live holder and replays its result

// The canon crate's test helpers, for canonical: at the root, where they expect each other
// (common names `crate::gen`).
#[path = "../../canon/tests/common/mod.rs"]
mod common;
#[path = "../../canon/tests/gen/mod.rs"]
mod gen;

#[path = "behaviour/batch.rs"]
mod batch;
#[path = "behaviour/bounds.rs"]
mod bounds;
#[path = "behaviour/canonical.rs"]
mod canonical;
#[path = "behaviour/claim_token.rs"]
mod claim_token;
#[path = "behaviour/concurrency.rs"]
mod concurrency;
#[path = "behaviour/counts.rs"]
mod counts;
#[path = "behaviour/grant_roles.rs"]
mod grant_roles;
#[path = "behaviour/identity.rs"]
mod identity;
#[path = "behaviour/isolation.rs"]
mod isolation;
#[path = "behaviour/policy_changes.rs"]
mod policy_changes;
#[path = "behaviour/retry_after.rs"]
mod retry_after;
#[path = "behaviour/send_email.rs"]
mod send_email;
#[path = "behaviour/sqlstates.rs"]
mod sqlstates;
#[path = "behaviour/unresolved.rs"]
mod unresolved;
#[path = "behaviour/wait.rs"]
mod wait;
