//! Outcome counters per owner and scope, in shared memory, since the server started.
//!
//! They exist only when the library is preloaded (shared memory is sized at server start);
//! otherwise counting is off and `idem_metrics()` shows NULL counters. Owner and scope pairs
//! beyond SLOTS share one overflow slot, shown as the scope `(other scopes)` with no owner
//! (only admins see it).

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
    /// 0: free. Otherwise a hash of the owner and the whole scope, never 0.
    hash: u64,
    owner: u32,
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
                owner: 0,
                len: 0,
                name: [0; NAME_BYTES],
                counts: Default::default(),
            }),
            overflow: Default::default(),
        }
    }
}

// SAFETY: plain data and atomics, no pointers: the table means the same in every process
// that maps the segment, and a zeroed or default-built one is valid.
unsafe impl PGRXSharedMemory for Table {}

// SAFETY: the lock's name is the only one this library registers, and carries its prefix,
// so it cannot clash with another library's shared memory.
static COUNTERS: PgLwLock<Table> = unsafe { PgLwLock::new(c"pg_idempotency_counters") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from `_PG_init` while the library is being preloaded.
pub fn init() {
    pg_shmem_init!(COUNTERS);
    ENABLED.store(true, Ordering::Relaxed);
}

pub fn hash(owner: u32, scope: &str) -> u64 {
    // FNV-1a; 0 marks a free slot.
    let h = owner
        .to_le_bytes()
        .into_iter()
        .chain(scope.bytes())
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
    h.max(1)
}

fn bump(counts: &[AtomicU64; 4], c: Counter) {
    counts[c as usize].fetch_add(1, Ordering::Relaxed);
}

/// Runs `f` on the slot of `owner` and `scope`, taking a free one if it has none (None:
/// the table is full and the scope has no slot).
fn with_slot<R>(owner: u32, scope: &str, f: impl Fn(&Slot) -> R) -> Option<R> {
    let h = hash(owner, scope);
    let start = (h as usize) % SLOTS;
    {
        // The common case: the scope has its slot already, found under a shared lock.
        let table = COUNTERS.share();
        for i in 0..SLOTS {
            let slot = &table.slots[(start + i) % SLOTS];
            if slot.hash == h {
                return Some(f(slot));
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
            return Some(f(&table.slots[idx]));
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
            slot.owner = owner;
            slot.hash = h;
            return Some(f(slot));
        }
    }
    None
}

/// Counts one outcome of `owner` for `scope`.
pub fn count(owner: pg_sys::Oid, scope: &str, c: Counter) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    if with_slot(u32::from(owner), scope, |slot| bump(&slot.counts, c)).is_none() {
        bump(&COUNTERS.share().overflow, c);
    }
}

fn counts_of(counts: &[AtomicU64; 4]) -> [i64; 4] {
    std::array::from_fn(|i| counts[i].load(Ordering::Relaxed) as i64)
}

/// Every slot in use: owner (None for the overflow slot), scope, counts.
fn snapshot() -> Vec<(Option<pg_sys::Oid>, String, [i64; 4])> {
    let mut out = Vec::new();
    if !ENABLED.load(Ordering::Relaxed) {
        return out;
    }
    let table = COUNTERS.share();
    for slot in table.slots.iter().filter(|s| s.hash != 0) {
        let name = String::from_utf8_lossy(&slot.name[..slot.len as usize]).into_owned();
        out.push((
            Some(pg_sys::Oid::from(slot.owner)),
            name,
            counts_of(&slot.counts),
        ));
    }
    let overflow = counts_of(&table.overflow);
    if overflow.iter().any(|&c| c > 0) {
        out.push((None, OVERFLOW.to_string(), overflow));
    }
    out
}

/// `idempotency._idem_counters()` (0.2.0 on): owner, scope, claimed, replay, in_progress,
/// mismatch.
pub fn idem_owner_counters(a: &Args) -> IdemResult<pg_sys::Datum> {
    let out: Vec<Vec<Column>> = snapshot()
        .into_iter()
        .map(|(owner, scope, counts)| {
            let mut row = vec![owner.map(pg_sys::Datum::from), scope.into_datum()];
            row.extend(counts.iter().map(|c| c.into_datum()));
            row
        })
        .collect();
    Ok(rows(a, &out))
}

/// Whether counting is on (the library was preloaded).
pub fn idem_counting(_a: &Args) -> IdemResult<pg_sys::Datum> {
    Ok(pg_sys::Datum::from(ENABLED.load(Ordering::Relaxed)))
}
