//! The record's state machine, decided once: what `begin` does with the record it read
//! ([`begin`]), whether a holder's fence holds it ([`held`]), what a completion leaves
//! ([`completion`]), and the values a claim taken over writes ([`take_over`]).
//!
//! Each is a pure function of the record as read, the call and the time: the extension
//! (pg_idempotency/src/begin.rs, holder.rs) and the client's `MemoryStore`
//! (client/src/memory.rs) read the record, ask here, then write what the answer says,
//! with their own guard against a concurrent change (a fenced statement, a mutex). Times
//! are the store's own ([`Time`]: the extension's microseconds, `SystemTime`), so neither
//! converts or allocates to ask. The PL/pgSQL variant (sql/pg_idempotency.sql) and
//! `RedisStore`'s scripts (client/src/redis_lua/) run inside their servers and state the
//! same rules in their own languages; the behaviour suite (tests/) and the parity suite
//! (client/tests/parity.rs) hold them to these.
//!
//! The refusals these decisions lead to are worded in [`crate::refusal`].

mod begin;
mod fenced;
mod time;

pub use begin::{begin, take_over, Again, Call, Step};
pub use fenced::{completion, extended_expiry, held, Holding, Lost, Op};
pub use time::Time;

use crate::State;

/// How many lost races a call tolerates before it gives up (`Contention`); each one means
/// another session changed the record between its read and its write.
pub const MAX_RACES: u32 = 1000;

/// The record as read, in the fields the decisions look at. A record that has expired may
/// be given: it is absent to every decision (expiry is decided at read time, purged or
/// not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read<'a, T> {
    pub state: State,
    pub fence: i64,
    pub attempt: i32,
    /// The first request's fingerprint, if it had one.
    pub fingerprint: Option<&'a [u8]>,
    /// None once completed.
    pub lease_until: Option<T>,
    pub expires_at: T,
    /// When the running attempt claimed (a takeover's own claim; a record claimed before
    /// 0.5.0 counts from its creation).
    pub claimed_at: T,
    /// The token of the claim holding the record, if its caller gave one.
    pub claim_token: Option<[u8; 16]>,
    /// Until when a record whose outcome is unknown (a claim, whose lease may lapse; a
    /// mark) stays past its expiry: None for a result, or where the store keeps no bound.
    pub unresolved_until: Option<T>,
    /// The length of the lease its holder last took (its claim, a takeover, its last
    /// extension), in microseconds (only a running claim's is looked at): None for a claim
    /// made before 0.9.0, whose holder never counts as stopped (pg_idempotency_protocol::estimate).
    pub lease_us: Option<u64>,
}

impl<T: Time> Read<'_, T> {
    /// Live until its expiry, or, while its outcome is unknown, until its unresolved
    /// bound: a lapsed claim past its ttl is taken over (same upstream key), a mark is
    /// still replayed, never a fresh claim.
    pub fn is_live(&self, now: T) -> bool {
        self.expires_at > now || self.unresolved_until.is_some_and(|u| u > now)
    }

    fn lease_live(&self, now: T) -> bool {
        self.lease_until.is_some_and(|l| l > now)
    }
}
