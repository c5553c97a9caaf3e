//! `idem_begin_batch`: `idem_begin` for many calls of one scope, in one statement.
//!
//! Every item is checked before any is decided, so a bad argument anywhere fails the batch
//! and nothing is claimed or counted. The items are then decided one by one, as
//! `idem_begin` decides a call, in the order of their keys: two batches that share keys
//! take their row locks in one order and cannot deadlock each other. The answers come back
//! in the order of the items. A refusal that a single call raises (a mismatch, a refused
//! repeat) is its item's outcome here, so one bad item does not undo the others' claims.

use pg_idempotency_protocol::BatchOutcome;
use pgrx::{pg_sys, IntoDatum};

use crate::args;
use crate::batch_args::{at_item, item_count, jsonb_elements};
use crate::begin::{self, Call};
use crate::call_args::BeginBatchArgs;
use crate::entry::{rows, Args, Column};
use crate::error::{ErrorKind, IdemResult};
use crate::metrics;
use crate::request;
use crate::roles;

pub fn idem_begin_batch(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = BeginBatchArgs::read(a);
    let scope = args::scope(given.scope)?;
    let requests = jsonb_elements(given.requests);
    let n = item_count(
        "idem_begin_batch",
        &[
            ("keys", given.keys.as_ref().map(Vec::len)),
            ("requests", requests.as_ref().map(Vec::len)),
            ("claim_tokens", given.claim_tokens.as_ref().map(Vec::len)),
        ],
        (
            "keys and requests must not both be null",
            "keys, or requests to derive them from",
        ),
    )?;
    let ttl = args::ttl(given.ttl)?;
    let lease = args::lease(given.lease)?;
    let on_cache_hit = args::on_cache_hit(given.on_cache_hit.as_deref())?;
    let on_mismatch = args::on_mismatch(given.on_mismatch.as_deref())?;
    if let (Some(lease), Some(ttl)) = (lease, ttl) {
        args::effective_lease(Some(lease), None, ttl)?;
    }
    let owner = roles::caller()?;

    let mut calls = Vec::with_capacity(n);
    for i in 0..n {
        let item = i + 1;
        let request = requests.as_ref().and_then(|r| r[i]);
        let fingerprint = request
            .map(request::fingerprint)
            .transpose()
            .map_err(|e| at_item(item, e))?;
        let key = given.keys.as_ref().and_then(|k| k[i].clone());
        let call = Call {
            scope: scope.clone(),
            key: begin::key_of(key, &fingerprint).map_err(|e| at_item(item, e))?,
            owner,
            fingerprint,
            ttl,
            lease,
            on_cache_hit,
            on_mismatch,
            // A batch answers at once: waiting on one item would hold every other's locks.
            wait: 0,
            claim_token: given.claim_tokens.as_ref().and_then(|t| t[i]),
            // A batch has no argument of its own: pg_idempotency.unresolved_ttl.
            unresolved_ttl: None,
        };
        calls.push(call);
    }

    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| calls[x].key.cmp(&calls[y].key).then(x.cmp(&y)));
    let mut answers: Vec<Vec<Column>> = vec![Vec::new(); n];
    let mut claimed = false;
    for i in order {
        let call = &calls[i];
        let columns: [Column; 10] = match begin::answer(call) {
            Ok(outcome) => {
                claimed |= matches!(outcome, begin::Outcome::Claimed { .. });
                begin::columns(outcome)
            }
            Err(e) if e.kind == ErrorKind::Mismatch => refused(BatchOutcome::Mismatch),
            Err(e) if e.kind == ErrorKind::RepeatRefused => refused(BatchOutcome::Refused),
            Err(e) => return Err(e),
        };
        let mut row = Vec::with_capacity(12);
        row.push(((i + 1) as i32).into_datum());
        row.extend_from_slice(&columns);
        row.push(call.key.as_str().into_datum());
        answers[i] = row;
    }
    metrics::flush(claimed);
    Ok(rows(a, &answers))
}

/// An item refused: its outcome, and nothing of the record it met.
fn refused(outcome: BatchOutcome) -> [Column; 10] {
    let mut columns: [Column; 10] = [None; 10];
    columns[0] = outcome.as_sql().into_datum();
    columns
}
