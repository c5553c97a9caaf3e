//! What the checker reports: the invariants of docs/reliability.md, and a broken one on a
//! key with the events that show it. Apart from the checks (`check.rs`, `check_kept.rs`,
//! `check_expiry.rs`), which all produce it.

use std::fmt;

/// The invariants, as docs/reliability.md numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// At most one accepted effect per key per life.
    I1,
    /// Acknowledged results are read back identically.
    I2,
    /// Fences strictly increase and are never reused.
    I3,
    /// No second life while the first may be live; one completion per life.
    I4,
    /// No record outlives its expiry by more than the purge interval, none is purged early.
    I5,
    /// A stale fence is refused.
    I6,
}

impl Invariant {
    pub fn summary(self) -> &'static str {
        match self {
            Invariant::I1 => "at most one accepted effect per key per life",
            Invariant::I2 => "an acknowledged result is read back identically",
            Invariant::I3 => "fences strictly increase per key and are never reused",
            Invariant::I4 => "no new life while one may be live, one completion per life",
            Invariant::I5 => {
                "no record outlives expires_at + purge interval + slack, none is purged early"
            }
            Invariant::I6 => "a superseded fence is refused",
        }
    }
}

/// One broken invariant: which, on which key, and the events that show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub invariant: Invariant,
    pub key: String,
    pub explanation: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} ({}) on key {}: {}",
            self.invariant,
            self.invariant.summary(),
            self.key,
            self.explanation
        )
    }
}
