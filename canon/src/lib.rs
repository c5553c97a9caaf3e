//! Canonical JSON for pg_idempotency (docs/canonical-json.md): RFC 8785 (JCS) with *lossless numbers*,
//! and its SHA-256.
//!
//! The same logical input gives the same bytes whether it starts as JSON text (the
//! extension parses the text form of a `jsonb`) or as a `serde_json::Value` (the client),
//! so a key computed in Rust equals the key computed in SQL.
//!
//! Numbers keep their exact decimal value: a number is written as its own significant
//! digits in the layout of ECMAScript's `Number::toString`. Where the number is exactly a
//! double's shortest form, that is precisely JCS's output; elsewhere JCS would round it to
//! the nearest double and two different amounts or ids would share one key.

mod number;
mod parse;
mod value;
mod write;

use sha2::{Digest, Sha256};

pub use number::canonical_number;

/// Deepest nesting of arrays and objects accepted; deeper input is an error, never a crash.
pub const MAX_DEPTH: usize = 128;

/// Why an input has no canonical form. More reasons may come in a later release: a
/// `match` on it needs a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CanonError {
    /// The text is not JSON.
    #[error("invalid JSON at byte {offset}: expected {expected}")]
    Syntax {
        offset: usize,
        expected: &'static str,
    },
    /// Arrays and objects nested deeper than [`MAX_DEPTH`].
    #[error("JSON nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// A string holds a UTF-16 surrogate without its pair.
    #[error("lone UTF-16 surrogate in a string at byte {offset}")]
    LoneSurrogate { offset: usize },
    /// A string holds U+0000, which `jsonb` (and so the SQL side) cannot hold.
    #[error("U+0000 in a string")]
    Nul,
}

/// The canonical form of JSON text.
pub fn canonical_text(json: &str) -> Result<String, CanonError> {
    parse::canonicalize(json)
}

/// The canonical form of a `serde_json::Value`: `i64`/`u64` numbers are exact integers,
/// `f64` numbers their shortest form.
pub fn canonical_value(value: &serde_json::Value) -> Result<String, CanonError> {
    value::canonicalize(value)
}

/// Whether a value has a canonical form: refuses exactly what [`canonical_value`] refuses
/// (U+0000, nesting deeper than [`MAX_DEPTH`]) without writing the form, for a client that
/// sends the value to SQL to be canonicalized there and refuses it before sending.
pub fn check_value(value: &serde_json::Value) -> Result<(), CanonError> {
    value::check(value, MAX_DEPTH)
}

/// Refuses U+0000 in any string or member name of a value, at any depth: what `jsonb`
/// cannot hold. For values stored but never canonicalized (a call's response); nesting
/// is not limited here.
pub fn check_nul(value: &serde_json::Value) -> Result<(), CanonError> {
    value::check(value, usize::MAX)
}

/// SHA-256 of canonical text.
pub fn sha256(canonical: &str) -> [u8; 32] {
    Sha256::digest(canonical.as_bytes()).into()
}

/// The request fingerprint of JSON text: SHA-256 of its canonical form.
pub fn hash_text(json: &str) -> Result<[u8; 32], CanonError> {
    canonical_text(json).map(|c| sha256(&c))
}

/// The request fingerprint of a value: SHA-256 of its canonical form.
pub fn hash_value(value: &serde_json::Value) -> Result<[u8; 32], CanonError> {
    canonical_value(value).map(|c| sha256(&c))
}

/// The HASH_INPUT key of a request: its fingerprint as lowercase hex.
pub fn key_of(fingerprint: &[u8; 32]) -> String {
    hex::encode(fingerprint)
}
