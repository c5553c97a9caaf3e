//! Outcome counters per scope, in shared memory, since the server started.
//!
//! They exist only when the library is preloaded (shared memory is sized at server start);
//! otherwise counting is off and `idem_metrics()` shows NULL counters. Scopes beyond
//! SLOTS share one overflow slot, shown as the scope `(other scopes)`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use pgrx::{pg_shmem_init, IntoDatum};

use crate::entry::{rows, Args, Column};
use crate::error::IdemResult;

const SLOTS: usize = 512;
const NAME_BYTES: usize = 128;
pub const OVERFLOW: &str = "(other scopes)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    Claimed = 0,
    Replay = 1,
    InProgress = 2,
    Mismatch = 3,
}

pub struct Slot {
    /// 0: free. Otherwise a hash of the whole scope, never 0.
    hash: u64,
    len: u16,
    name: [u8; NAME_BYTES],
    counts: [AtomicU64; 4],
}

pub struct Table {
    slots: [Slot; SLOTS],
    overflow: [AtomicU64; 4],
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: std::array::from_fn(|_| Slot {
                hash: 0,
                len: 0,
                name: [0; NAME_BYTES],
                counts: Default::default(),
            }),
            overflow: Default::default(),
        }
    }
}

// SAFETY: plain data and atomics, no pointers.
unsafe impl PGRXSharedMemory for Table {}

static COUNTERS: PgLwLock<Table> = unsafe { PgLwLock::new(c"pg_idempotency_counters") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from `_PG_init` while the library is being preloaded.
pub fn init() {
    pg_shmem_init!(COUNTERS);
    ENABLED.store(true, Ordering::Relaxed);
}

fn hash(scope: &str) -> u64 {
    // FNV-1a; 0 marks a free slot.
    let h = scope.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    h.max(1)
}

fn bump(counts: &[AtomicU64; 4], c: Counter) {
    counts[c as usize].fetch_add(1, Ordering::Relaxed);
}

/// Counts one outcome for `scope`.
pub fn count(scope: &str, c: Counter) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let h = hash(scope);
    let start = (h as usize) % SLOTS;
    {
        // The common case: the scope has its slot already, found under a shared lock.
        let table = COUNTERS.share();
        for i in 0..SLOTS {
            let slot = &table.slots[(start + i) % SLOTS];
            if slot.hash == h {
                return bump(&slot.counts, c);
            }
            if slot.hash == 0 {
                break;
            }
        }
    }
    let mut table = COUNTERS.exclusive();
    for i in 0..SLOTS {
        let idx = (start + i) % SLOTS;
        if table.slots[idx].hash == h {
            return bump(&table.slots[idx].counts, c);
        }
        if table.slots[idx].hash == 0 {
            let slot = &mut table.slots[idx];
            let bytes = scope.as_bytes();
            // Cut at a character boundary, so the name stays valid UTF-8.
            let mut n = bytes.len().min(NAME_BYTES);
            while !scope.is_char_boundary(n) {
                n -= 1;
            }
            slot.name[..n].copy_from_slice(&bytes[..n]);
            slot.len = n as u16;
            slot.hash = h;
            return bump(&slot.counts, c);
        }
    }
    bump(&table.overflow, c);
}

/// `idempotency._idem_counters()`: scope, claimed, replay, in_progress, mismatch.
pub fn idem_counters(a: &Args) -> IdemResult<pg_sys::Datum> {
    let mut out: Vec<Vec<Column>> = Vec::new();
    if ENABLED.load(Ordering::Relaxed) {
        let table = COUNTERS.share();
        let row = |name: &str, counts: &[AtomicU64; 4]| -> Vec<Column> {
            let mut r = vec![name.into_datum()];
            r.extend(
                counts
                    .iter()
                    .map(|c| (c.load(Ordering::Relaxed) as i64).into_datum()),
            );
            r
        };
        for slot in table.slots.iter().filter(|s| s.hash != 0) {
            let name = String::from_utf8_lossy(&slot.name[..slot.len as usize]).into_owned();
            out.push(row(&name, &slot.counts));
        }
        if table.overflow.iter().any(|c| c.load(Ordering::Relaxed) > 0) {
            out.push(row(OVERFLOW, &table.overflow));
        }
    }
    Ok(rows(a, &out))
}

/// Whether counting is on (the library was preloaded).
pub fn idem_counting(_a: &Args) -> IdemResult<pg_sys::Datum> {
    Ok(pg_sys::Datum::from(ENABLED.load(Ordering::Relaxed)))
}
