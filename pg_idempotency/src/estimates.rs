//! Each owner's and scope's estimate of how long its calls take from claim to completion
//! (pg_idempotency_protocol::estimate), in shared memory: `retry_after` is computed from it.
//!
//! Unlike the counters, an estimate is advice, so the table forgets: scopes are many and
//! change (a scope per tenant, per test run), and a new scope must get an estimate however
//! many came before it. A scope lives in one of WINDOW slots from its hash's position; when
//! they are all taken, the one least recently sampled gives way. Slots hold the scope's
//! 64-bit hash, not its name: two scopes whose hashes collide would share advice, nothing
//! more. Without the library preloaded there is no table and no scope has an estimate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pgrx::lwlock::PgLwLock;
use pgrx::pg_shmem_init;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;

use crate::clock::{self, Micros};
use crate::metrics;

const SLOTS: usize = 4096;
/// How many slots from a scope's position it may live in.
const WINDOW: usize = 16;

pub struct Slot {
    /// 0: free. Otherwise the hash of the owner and the whole scope, never 0.
    hash: AtomicU64,
    /// Microseconds, weighted toward recent calls; 0 while the slot is being taken.
    estimate_us: AtomicU64,
    /// When the slot last took a sample (microseconds since 2000, as timestamptz).
    sampled_at: AtomicU64,
}

pub struct Table {
    slots: [Slot; SLOTS],
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: std::array::from_fn(|_| Slot {
                hash: AtomicU64::new(0),
                estimate_us: AtomicU64::new(0),
                sampled_at: AtomicU64::new(0),
            }),
        }
    }
}

// SAFETY: atomics only, no pointers: the table means the same in every process that maps
// the segment, and a zeroed or default-built one is valid (every slot free).
unsafe impl PGRXSharedMemory for Table {}

// SAFETY: the lock's name is the only one of this name this library registers, and carries
// its prefix, so it cannot clash with another library's shared memory.
static ESTIMATES: PgLwLock<Table> = unsafe { PgLwLock::new(c"pg_idempotency_estimates") };
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Called from `_PG_init` while the library is being preloaded.
pub fn init() {
    pg_shmem_init!(ESTIMATES);
    ENABLED.store(true, Ordering::Relaxed);
}

fn window(h: u64) -> impl Iterator<Item = usize> + Clone {
    let start = (h as usize) % SLOTS;
    (0..WINDOW).map(move |i| (start + i) % SLOTS)
}

/// The estimate of `owner`'s calls of `scope`, in microseconds: None before its first
/// completion since the server started (or since it gave way to other scopes).
pub fn of(owner: pg_sys::Oid, scope: &str) -> Option<u64> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    let h = metrics::hash(u32::from(owner), scope);
    let table = ESTIMATES.share();
    window(h)
        .map(|i| &table.slots[i])
        .find(|s| s.hash.load(Ordering::Relaxed) == h)
        .map(|s| s.estimate_us.load(Ordering::Relaxed))
        .filter(|&us| us != 0)
}

/// Takes one call's time from claim to completion into its scope's estimate. A slot's
/// estimate is updated under the shared lock: two completions at the same moment may each
/// move it from the same value, and one sample is then lost, which advice can afford.
pub fn sample(owner: pg_sys::Oid, scope: &str, micros: i64) {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    // A clock stepped back between claim and completion makes no negative duration; 0
    // means "none", so a sample of 0 counts as 1 µs. The formula is the same in any unit.
    let us = (micros.max(0) as u64).max(1);
    let now = clock::now();
    let h = metrics::hash(u32::from(owner), scope);
    {
        let table = ESTIMATES.share();
        if let Some(s) = window(h)
            .map(|i| &table.slots[i])
            .find(|s| s.hash.load(Ordering::Relaxed) == h)
        {
            return update(s, us, now);
        }
    }
    // A scope new to the table: a free slot of its window, else the least recently sampled.
    let table = ESTIMATES.exclusive();
    let slots = window(h).map(|i| &table.slots[i]);
    if let Some(s) = slots.clone().find(|s| s.hash.load(Ordering::Relaxed) == h) {
        return update(s, us, now);
    }
    let Some(s) = slots.min_by_key(|s| {
        (
            s.hash.load(Ordering::Relaxed) != 0,
            s.sampled_at.load(Ordering::Relaxed),
        )
    }) else {
        return;
    };
    s.estimate_us.store(0, Ordering::Relaxed);
    s.hash.store(h, Ordering::Relaxed);
    update(s, us, now);
}

fn update(s: &Slot, us: u64, now: Micros) {
    let before = s.estimate_us.load(Ordering::Relaxed);
    let next =
        pg_idempotency_protocol::estimate::next_estimate((before != 0).then_some(before), us);
    s.estimate_us.store(next.max(1), Ordering::Relaxed);
    s.sampled_at.store(now.max(0) as u64, Ordering::Relaxed);
}
