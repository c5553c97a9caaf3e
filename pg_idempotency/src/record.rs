//! One row of `idempotency.records`, as both read paths (the key index, a statement: see
//! record_columns.rs) give it, and as the state machine reads it. Apart from store.rs, which
//! writes records, so that the mapping of a row (record_columns.rs) needs nothing of it.

use pgrx::pg_sys;

use crate::clock::Micros;

/// A record's state, in the protocol's words (the table's CHECK allows only these).
pub use pg_idempotency_protocol::State;

/// One row of `idempotency.records`.
pub struct Record {
    pub state: State,
    pub fence: i64,
    pub attempt: i32,
    pub fingerprint: Option<Vec<u8>>,
    pub upstream_key: pgrx::Uuid,
    /// Copied out of SPI's memory into the caller's, so it outlives the SPI connection.
    pub response: Option<pg_sys::Datum>,
    pub created_at: Micros,
    pub completed_at: Option<Micros>,
    pub lease_until: Option<Micros>,
    pub expires_at: Micros,
    pub ttl: i64,
    pub owner: pg_sys::Oid,
    /// The token of the claim holding the record, and whether that claim was a takeover.
    pub claim_token: Option<pgrx::Uuid>,
    pub recovered: bool,
    /// When the running attempt claimed (None where the schema predates 0.5.0, or for a
    /// record claimed before its update).
    pub claimed_at: Option<Micros>,
    /// Until when the record stays past its expiry while its outcome is unknown (None
    /// before 0.8.0, and for a result).
    pub unresolved_until: Option<Micros>,
    /// The length of the lease the holder last took, in microseconds (None before 0.9.0,
    /// and for a record claimed before its update).
    pub lease: Option<i64>,
    /// Where the row version that was read lives, when it was read from the index: a write
    /// guarded by the same conditions can go straight to it.
    pub tid: Option<pg_sys::ItemPointerData>,
}

impl Record {
    /// Expiry is decided at read time: an expired row is absent, purged or not.
    pub fn is_live(&self, now: Micros) -> bool {
        self.read().is_live(now)
    }

    /// The record as the state machine (pg_idempotency_protocol::decide) reads it.
    pub fn read(&self) -> pg_idempotency_protocol::decide::Read<'_, Micros> {
        pg_idempotency_protocol::decide::Read {
            state: self.state,
            fence: self.fence,
            attempt: self.attempt,
            fingerprint: self.fingerprint.as_deref(),
            lease_until: self.lease_until,
            expires_at: self.expires_at,
            claimed_at: self.claimed_at.unwrap_or(self.created_at),
            claim_token: self.claim_token.map(|t| *t.as_bytes()),
            unresolved_until: self.unresolved_until,
            lease_us: self.lease.map(|l| l.max(0) as u64),
        }
    }
}
