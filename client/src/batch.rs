//! Batches: many calls of one scope claimed, or completed, in one round trip (`PgStore`: one
//! statement, `idem_begin_batch` / `idem_complete_batch`; `RedisStore`: one pipeline).
//!
//! Each item gets the answer a single call would get, a refusal included: the batch's
//! answer is `Ok(items)`, one `Result` per item in the order given, where a mismatch, a
//! refused repeat (`begin_batch`) or a lost lease (`complete_batch`) is that item's `Err`.
//! An argument no store can take (a blank key, an oversized response) fails the whole
//! batch before any item is touched.

use serde_json::Value;
use uuid::Uuid;

use crate::error::{ErrorKind, Result};
use crate::limits::{response as storable_response, scope_and_key_without_nul};
use crate::types::{Begin, BeginOptions, Completed, OnCacheHit, OnMismatch};

/// The most items one batch takes (the SQL API's limit, protocol's `MAX_BATCH_ITEMS`).
pub const MAX_BATCH_ITEMS: usize = pg_idempotency_protocol::functions::MAX_BATCH_ITEMS;

/// One call of a batch claim.
///
/// ```no_run
/// use pg_idempotency_client::{BatchBegin, BatchComplete, BatchOptions, Begin, IdempotencyStore};
/// use serde_json::{json, Value};
///
/// async fn send_all(
///     store: &dyn IdempotencyStore,
///     jobs: &[(String, Value)],
/// ) -> pg_idempotency_client::Result<()> {
///     let items: Vec<BatchBegin> = jobs
///         .iter()
///         .map(|(id, payload)| BatchBegin::new(id).request(payload.clone()))
///         .collect();
///     let answers = store
///         .begin_batch("send_email", &items, &BatchOptions::default())
///         .await?;
///     let mut done = Vec::new();
///     for ((id, _), answer) in jobs.iter().zip(answers) {
///         match answer {
///             // The effect, then its result under the fence.
///             Ok(Begin::Claimed(c)) => done.push(BatchComplete::succeeded(id, c.fence, json!({"sent": true}))),
///             Ok(Begin::Replay(_)) | Ok(Begin::InProgress(_)) => {}
///             // A mismatch or a refused repeat: this item only.
///             Err(refused) => eprintln!("{id}: {refused}"),
///         }
///     }
///     for (c, answer) in done.iter().zip(store.complete_batch("send_email", &done).await?) {
///         if let Err(lost) = answer {
///             eprintln!("{}: {lost}", c.key);
///         }
///     }
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchBegin {
    pub key: String,
    /// The call's input: its canonical SHA-256 is the fingerprint checked for mismatches.
    pub request: Option<Value>,
    /// This attempt's token (see `BeginOptions::claim_token`): a repeat of the batch with
    /// the same tokens, made because its answer never arrived, gets its claims back.
    pub claim_token: Option<Uuid>,
}

impl BatchBegin {
    pub fn new(key: impl Into<String>) -> BatchBegin {
        BatchBegin {
            key: key.into(),
            ..BatchBegin::default()
        }
    }

    pub fn request(mut self, request: Value) -> BatchBegin {
        self.request = Some(request);
        self
    }

    pub fn claim_token(mut self, token: Uuid) -> BatchBegin {
        self.claim_token = Some(token);
        self
    }
}

/// What every item of a batch claim shares; `None` leaves a setting to the scope's policy
/// and then to the defaults. A batch never waits for a running holder: an item held by
/// another attempt answers `InProgress` with its `retry_after` at once.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchOptions {
    pub ttl: Option<std::time::Duration>,
    pub lease: Option<std::time::Duration>,
    pub on_cache_hit: Option<OnCacheHit>,
    pub on_mismatch: Option<OnMismatch>,
}

impl BatchOptions {
    /// A single call's options for one item.
    pub(crate) fn for_item(&self, item: &BatchBegin) -> BeginOptions {
        BeginOptions {
            request: item.request.clone(),
            ttl: self.ttl,
            lease: self.lease,
            on_cache_hit: self.on_cache_hit,
            on_mismatch: self.on_mismatch,
            wait: std::time::Duration::ZERO,
            claim_token: item.claim_token,
            // As idem_begin_batch: the scope's policy, else the default.
            unresolved_ttl: None,
        }
    }
}

/// One claim of a batch completion.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchComplete {
    pub key: String,
    pub fence: i64,
    pub response: Option<Value>,
    pub succeeded: bool,
    /// None: the scope's policy (failures are not cached by default).
    pub cache_failure: Option<bool>,
}

impl BatchComplete {
    /// A success with its response.
    pub fn succeeded(key: impl Into<String>, fence: i64, response: Value) -> BatchComplete {
        BatchComplete {
            key: key.into(),
            fence,
            response: Some(response),
            succeeded: true,
            cache_failure: None,
        }
    }

    /// A failure with its response; `cache` says whether a retry replays it.
    pub fn failed(
        key: impl Into<String>,
        fence: i64,
        response: Value,
        cache: Option<bool>,
    ) -> BatchComplete {
        BatchComplete {
            key: key.into(),
            fence,
            response: Some(response),
            succeeded: false,
            cache_failure: cache,
        }
    }
}

/// Whether a single call's error is its item's answer in a batch claim (the SQL API
/// answers it per item) rather than the whole batch's.
pub(crate) fn an_items_begin_answer(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Mismatch | ErrorKind::RepeatRefused)
}

/// The same for a batch completion.
pub(crate) fn an_items_complete_answer(kind: ErrorKind) -> bool {
    kind == ErrorKind::LeaseLost
}

/// Refuses a batch over the limit, before any item is touched.
pub(crate) fn check_count(n: usize) -> Result<()> {
    if n > MAX_BATCH_ITEMS {
        return Err(crate::error::Error::new(
            ErrorKind::InvalidArgument,
            "too many items in one batch",
        )
        .with_detail(format!(
            "The batch has {n} items; one call takes at most {MAX_BATCH_ITEMS}."
        ))
        .with_hint(format!(
            "Split it into batches of at most {MAX_BATCH_ITEMS} items."
        )));
    }
    Ok(())
}

/// What the server would refuse while reading the batch's parameters (a NUL, a value
/// JSON cannot hold): refused with the kinds a single call gets.
pub(crate) fn check_begin_items(scope: &str, items: &[BatchBegin]) -> Result<()> {
    check_count(items.len())?;
    for item in items {
        scope_and_key_without_nul(scope, &item.key)?;
        if let Some(request) = &item.request {
            pg_idempotency_canon::check_value(request)?;
        }
    }
    Ok(())
}

pub(crate) fn check_complete_items(scope: &str, items: &[BatchComplete]) -> Result<()> {
    check_count(items.len())?;
    for item in items {
        scope_and_key_without_nul(scope, &item.key)?;
        storable_response(item.response.as_ref())?;
    }
    Ok(())
}

/// One item's claim answer.
pub type BatchBegun = Result<Begin>;
/// One item's completion answer.
pub type BatchCompleted = Result<Completed>;
