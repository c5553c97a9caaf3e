//! Attacks on the SQL API and its storage, on the backend under test, one module per kind
//! (attacks/<module>.rs), linked as one test binary. Each test works in a database of its
//! own (or a throwaway server), with roles of its own, so the modules run side by side.
//!
//! - dump: pg_dump / pg_restore of a database two roles use: owners, grants, fences
//! - durations: extreme durations wherever one is taken: refused or bounded
//! - fences: forged, stale and foreign fences, and a fence sequence at its end
//! - inputs: hostile and look-alike text in scope, key, request and response
//! - nesting: deep and wide JSON: refused with the documented SQLSTATE, no crash
//! - schema: a non-superuser install, planted objects, overloads, squatted names
//! - search_path: hostile schemas and temp objects first on the caller's search_path
//! - sizes: oversized scope, key and response: refused, nothing written
//! - storage: direct access to the storage, raised limits, synchronous_commit off

#[path = "attacks/dump.rs"]
mod dump;
#[path = "attacks/durations.rs"]
mod durations;
#[path = "attacks/fences.rs"]
mod fences;
#[path = "attacks/inputs.rs"]
mod inputs;
#[path = "attacks/nesting.rs"]
mod nesting;
#[path = "attacks/schema.rs"]
mod schema;
#[path = "attacks/search_path.rs"]
mod search_path;
#[path = "attacks/sizes.rs"]
mod sizes;
#[path = "attacks/storage.rs"]
mod storage;
