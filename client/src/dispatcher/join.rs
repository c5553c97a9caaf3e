//! A call of a key whose holder still lives in this process joins it (see
//! `live_holders`): it waits for the holder's recording, then asks the store, which replays
//! it; or, while the store cannot take it, it is answered with the holder's result. It
//! never takes the call over through the store beside a holder that has the result.
//!
//! Before it waits, the store's gate admits the wait (`IdempotencyStore::admit_joined_wait`,
//! as a store caps the duplicates that wait inside its `begin`); a wait not admitted is
//! answered at once, as if its bound had run out.

use std::time::Duration;

use tokio::time::Instant;

use super::unrecorded;
use crate::call::Dispatched;
use crate::error::Result;
use crate::idempotent::Idempotent;
use crate::joined_wait::JoinedWait;
use crate::live_holders::{Joined, Stage};
use crate::ran::Ran;
use crate::store::IdempotencyStore;
use crate::tool::ToolSpec;

/// What a joining call is told while the holder's result is not recorded.
const NOT_YET_RECORDED: &str = "A holder of this call in this process ran it and has this result, but the store has not taken it yet (it cannot be reached, or is slow): the holder tries again under the claim's fence until the store takes it or the record expires. Calls of this key in this process wait for that holder instead of running the tool again; while the store is out of reach the lease cannot be renewed, so another process may take the call over once it lapses.";

/// None: the holder settled (or ended): the store answers the call. Some: the answer,
/// given for the holder (in progress, or its result not yet recorded).
pub(super) async fn join(
    store: &dyn IdempotencyStore,
    spec: &ToolSpec,
    key: &str,
    idem: &Idempotent,
    joined: Joined,
    deadline: Option<(Instant, Duration)>,
) -> Result<Option<Dispatched>> {
    let Joined { mut stage, lease } = joined;
    // The store's permit to wait, asked before the first wait and held until the answer.
    let mut admitted: Option<JoinedWait<'_>> = None;
    let seen = loop {
        // A running tool is waited for as long as the call's own `wait` (as the store makes
        // a duplicate wait); a result being recorded as long as the lease, as the holder's
        // own dispatch waits for it.
        let seen = stage.borrow_and_update().clone();
        let bound = match &seen {
            Stage::Settled => return Ok(None),
            Stage::Running => idem.wait.unwrap_or_default(),
            Stage::Ran(_) => lease.max(idem.wait.unwrap_or_default()),
        };
        let until = Instant::now() + bound;
        let until = deadline.map_or(until, |(at, _)| at.min(until));
        if admitted.is_none() && until > Instant::now() {
            match store.admit_joined_wait(&spec.name, key) {
                Some(permit) => admitted = Some(permit),
                // Not admitted: answered as a duplicate without a wait is, now.
                None => break seen,
            }
        }
        match tokio::time::timeout_at(until, stage.changed()).await {
            Ok(Ok(())) => continue,
            // The holder ended (its entry with it).
            Ok(Err(_)) => return Ok(None),
            // The stage moved on as the bound ran out (a tool that returned just then):
            // the new stage has its own bound (a result being recorded is waited for).
            Err(_) if stage.has_changed().unwrap_or(true) => continue,
            // The answer is the stage the bound was for, not a later one.
            Err(_) => break seen,
        }
    };
    match seen {
        Stage::Settled => Ok(None),
        // This call did not run the tool: the holder's result is handed on as a replay.
        Stage::Ran(ran @ (Ran::Ok(_) | Ran::Found(_))) => {
            Err(unrecorded(spec, &ran, NOT_YET_RECORDED).with_replayed())
        }
        // Running, or a failure (or refusal) being recorded: once recorded, the store
        // answers (a remembered failure replayed, a released one run again).
        _ => Ok(Some(Dispatched::InProgress {
            retry_after: (lease / 10).clamp(Duration::from_millis(20), Duration::from_secs(1)),
        })),
    }
}
