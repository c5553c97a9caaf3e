//! `idem_complete_batch`: `idem_complete` for many claims of one scope, in one statement.
//!
//! As in `idem_begin_batch`, every item is checked first (a bad argument fails the batch
//! and writes nothing), then the items are completed in key order and answered in item
//! order. A lost lease, which a single call raises, is its item's outcome here: the others'
//! effects happened, and their results are recorded.

use pg_idempotency_protocol::BatchCompletion;
use pgrx::{pg_sys, IntoDatum};

use crate::args;
use crate::batch_args::{at_item, item_count, jsonb_elements};
use crate::call_args::CompleteBatchArgs;
use crate::entry::{rows, Args, Column};
use crate::error::{ErrorKind, IdemResult};
use crate::fenced::{self, Held};
use crate::metrics;
use crate::request;

struct Item {
    held: Held,
    response: Option<pg_sys::Datum>,
    succeeded: bool,
    cache_failure: Option<bool>,
}

pub fn idem_complete_batch(a: &Args) -> IdemResult<pg_sys::Datum> {
    let given = CompleteBatchArgs::read(a);
    let scope = args::scope(given.scope)?;
    let responses = jsonb_elements(given.responses);
    let (keys, fences) = (given.keys, given.fences);
    let n = item_count(
        "idem_complete_batch",
        &[
            ("keys", keys.as_ref().map(Vec::len)),
            ("fences", fences.as_ref().map(Vec::len)),
            ("responses", responses.as_ref().map(Vec::len)),
            ("succeeded", given.succeeded.as_ref().map(Vec::len)),
            ("cache_failure", given.cache_failure.as_ref().map(Vec::len)),
        ],
        ("keys must not be null", "keys, fences and responses"),
    )?;

    let mut items = Vec::with_capacity(n);
    for i in 0..n {
        let item = i + 1;
        let key = keys.as_ref().and_then(|k| k[i].clone());
        let fence = fences.as_ref().and_then(|f| f[i]);
        let held = fenced::held(Some(scope.clone()), key, fence).map_err(|e| at_item(item, e))?;
        let response = responses.as_ref().and_then(|r| r[i]);
        request::check_response_size(response).map_err(|e| at_item(item, e))?;
        items.push(Item {
            held,
            response,
            // NULL: succeeded, as a single call's default.
            succeeded: given.succeeded.as_ref().and_then(|s| s[i]).unwrap_or(true),
            cache_failure: given.cache_failure.as_ref().and_then(|c| c[i]),
        });
    }

    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| items[x].held.key.cmp(&items[y].held.key).then(x.cmp(&y)));
    let mut answers: Vec<Vec<Column>> = vec![Vec::new(); n];
    for i in order {
        let it = &items[i];
        let (outcome, state, expires_at) =
            match fenced::complete(&it.held, it.response, it.succeeded, it.cache_failure) {
                Ok((state, expires_at)) => (BatchCompletion::Completed, Some(state), expires_at),
                Err(e) if e.kind == ErrorKind::LeaseLost => {
                    (BatchCompletion::LeaseLost, None, None)
                }
                Err(e) => return Err(e),
            };
        answers[i] = vec![
            ((i + 1) as i32).into_datum(),
            it.held.key.as_str().into_datum(),
            outcome.as_sql().into_datum(),
            state.and_then(|s| s.into_datum()),
            expires_at.map(pg_sys::Datum::from),
        ];
    }
    metrics::flush(true);
    Ok(rows(a, &answers))
}
