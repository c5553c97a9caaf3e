//! The records' columns as both read paths take them, in one table, and the one mapping of a
//! row of them to a [`Record`]: read from the key index and the heap (`fetch`), or by a
//! statement, for a table that only SQL reaches (one distributed by Citus).

use pgrx::pg_sys;
use pgrx::spi::SpiTupleTable;
use pgrx::FromDatum;

use crate::fetch;
use crate::record::{Record, State};
use crate::relations::SchemaVersion;

/// The columns a read takes, in this order (the mapping below reads them by position). A
/// schema of 0.3.0 or 0.4.0 lacks the last three, one of 0.5.0 to 0.7.0 the last two, one
/// of 0.8.0 the last.
static COLUMNS: [&str; 17] = [
    "state",
    "fence",
    "attempt",
    "fingerprint",
    "upstream_key",
    "response",
    "created_at",
    "completed_at",
    "lease_until",
    "expires_at",
    "ttl",
    "owner",
    "claim_token",
    "recovered",
    "claimed_at",
    "unresolved_until",
    "lease_length",
];

/// The columns of [`COLUMNS`] that `schema` has: always a 'static prefix of it, since
/// `fetch` remembers where a list's columns sit by the list's address and length.
pub fn of(schema: SchemaVersion) -> &'static [&'static str] {
    if schema >= SchemaVersion::V0_9 {
        &COLUMNS
    } else if schema >= SchemaVersion::V0_8 {
        &COLUMNS[..16]
    } else if schema >= SchemaVersion::V0_5 {
        &COLUMNS[..15]
    } else {
        &COLUMNS[..14]
    }
}

/// A row found by either read path, its values by position in [`of`]'s list.
pub trait Values {
    fn text(&self, i: usize) -> Option<String>;
    /// A record's state (NULL reads as the empty word, which no state is).
    fn state(&self, i: usize) -> State {
        state_named(&self.text(i).unwrap_or_default())
    }
    fn bytes(&self, i: usize) -> Option<Vec<u8>>;
    fn uuid(&self, i: usize) -> Option<pgrx::Uuid>;
    /// A value passed by value: bigint, integer, boolean, regrole, and timestamptz (its
    /// microseconds since 2000).
    fn int(&self, i: usize) -> Option<i64>;
    /// An interval in microseconds.
    fn interval_micros(&self, i: usize) -> Option<i64>;
    /// A copy of a by-reference value that outlives the read (the response).
    fn kept(&self, i: usize) -> Option<pg_sys::Datum>;
    /// Where the row version lives, when the read knows it.
    fn tid(&self) -> Option<pg_sys::ItemPointerData>;
}

fn state_named(word: &str) -> State {
    State::parse(word)
        .unwrap_or_else(|| pgrx::error!("pg_idempotency: a record has the unknown state {word:?}"))
}

/// The record a row of [`of`]`(schema)`'s columns holds.
pub fn record(row: &impl Values, schema: SchemaVersion) -> Record {
    Record {
        state: row.state(0),
        fence: row.int(1).unwrap_or_default(),
        attempt: row.int(2).unwrap_or_default() as i32,
        fingerprint: row.bytes(3),
        upstream_key: row
            .uuid(4)
            .unwrap_or_else(|| pgrx::Uuid::from_bytes([0; 16])),
        response: row.kept(5),
        created_at: row.int(6).unwrap_or_default(),
        completed_at: row.int(7),
        lease_until: row.int(8),
        expires_at: row.int(9).unwrap_or_default(),
        ttl: row.interval_micros(10).unwrap_or_default(),
        owner: row
            .int(11)
            .map(|o| pg_sys::Oid::from(o as u32))
            .unwrap_or(pg_sys::InvalidOid),
        claim_token: row.uuid(12),
        recovered: row.int(13).unwrap_or_default() != 0,
        claimed_at: if schema >= SchemaVersion::V0_5 {
            row.int(14)
        } else {
            None
        },
        unresolved_until: if schema >= SchemaVersion::V0_8 {
            row.int(15)
        } else {
            None
        },
        lease: if schema >= SchemaVersion::V0_9 {
            row.interval_micros(16)
        } else {
            None
        },
        tid: row.tid(),
    }
}

impl Values for fetch::Row<'_> {
    fn text(&self, i: usize) -> Option<String> {
        fetch::Row::text(self, i)
    }
    fn state(&self, i: usize) -> State {
        // Every read takes the state: compared in place, without a copy of the word.
        self.with_str(i, State::parse)
            .flatten()
            .unwrap_or_else(|| state_named(&self.text(i).unwrap_or_default()))
    }
    fn bytes(&self, i: usize) -> Option<Vec<u8>> {
        fetch::Row::bytes(self, i)
    }
    fn uuid(&self, i: usize) -> Option<pgrx::Uuid> {
        fetch::Row::uuid(self, i)
    }
    fn int(&self, i: usize) -> Option<i64> {
        fetch::Row::int(self, i)
    }
    fn interval_micros(&self, i: usize) -> Option<i64> {
        fetch::Row::interval_micros(self, i)
    }
    fn kept(&self, i: usize) -> Option<pg_sys::Datum> {
        self.copied(i)
    }
    fn tid(&self) -> Option<pg_sys::ItemPointerData> {
        Some(fetch::Row::tid(self))
    }
}

/// The current row of a statement's result whose record columns start at `first` (1-based,
/// as SPI counts).
pub struct Statement<'a, 'conn> {
    pub table: &'a SpiTupleTable<'conn>,
    pub first: usize,
}

impl Statement<'_, '_> {
    fn get<T: FromDatum + pgrx::IntoDatum>(&self, i: usize) -> Option<T> {
        self.table
            .get::<T>(self.first + i)
            .unwrap_or_else(|e| panic!("pg_idempotency: bad column {}: {e}", COLUMNS[i]))
    }

    fn datum(&self, i: usize) -> Option<pg_sys::Datum> {
        self.table
            .get_datum_by_ordinal(self.first + i)
            .unwrap_or_else(|e| panic!("pg_idempotency: bad column {}: {e}", COLUMNS[i]))
    }
}

impl Values for Statement<'_, '_> {
    fn text(&self, i: usize) -> Option<String> {
        self.get(i)
    }
    fn bytes(&self, i: usize) -> Option<Vec<u8>> {
        self.get(i)
    }
    fn uuid(&self, i: usize) -> Option<pgrx::Uuid> {
        self.get(i)
    }
    fn int(&self, i: usize) -> Option<i64> {
        // The datum itself, as the index path reads it: pgrx would check the SQL type of
        // each (and has none for regrole).
        self.datum(i).map(|d| d.value() as i64)
    }
    fn interval_micros(&self, i: usize) -> Option<i64> {
        self.get::<pgrx::datum::Interval>(i)
            .and_then(|iv| crate::args::interval_micros(&iv))
            .map(|us| us as i64)
    }
    fn kept(&self, i: usize) -> Option<pg_sys::Datum> {
        // SAFETY: we are inside the SPI connection that read the datum, a jsonb (a varlena:
        // not by value, length -1); SPI_datumTransfer copies it into the memory context that
        // was current at SPI_connect, so it outlives SPI_finish.
        self.datum(i)
            .map(|d| unsafe { pg_sys::SPI_datumTransfer(d, false, -1) })
    }
    fn tid(&self) -> Option<pg_sys::ItemPointerData> {
        None
    }
}
