//! What a claimed request's handler is told, and how it completes the call inside its own
//! database transaction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pg_idempotency_client::{ApiSchema, Completed, IdempotencyStore, PgStore, StatementMode};
use uuid::Uuid;

use crate::headers::ReplayHeaders;
use crate::outcome::{fate, Fate};
use crate::rule::Rule;
use crate::stored::StoredResponse;

/// The claim a request holds, as its handler finds it among the request's extensions
/// (`axum::Extension<RequestClaim>`): the store's scope and key, the attempt's fence, and
/// how to complete the call in the handler's own transaction. Built from the client's
/// [`pg_idempotency_client::Claim`] (the store's answer to `begin`) when the layer claims the call.
#[derive(Debug, Clone)]
pub struct RequestClaim {
    /// The store's scope (principal and route) and the caller's key.
    pub scope: String,
    pub key: String,
    /// This attempt's fencing token: a later attempt's is larger.
    pub fence: i64,
    /// How many times the call has been claimed (1 the first time).
    pub attempt: i32,
    /// An earlier attempt's lease lapsed without a result: it may have done part of the
    /// work (check before doing it again).
    pub recovered: bool,
    /// The same for every attempt of the call: send it to providers downstream.
    pub upstream_key: Uuid,
    pub(crate) rule: Rule,
    /// Set once the handler completed the call in its own transaction: the layer then
    /// checks what committed instead of completing.
    pub(crate) in_transaction: Arc<AtomicBool>,
    /// The layer's header policy: `complete_in` stores only what a replay may carry.
    pub(crate) headers: Arc<ReplayHeaders>,
    /// The schema of the layer's store (a `PgStore`), where `complete_in` calls the API;
    /// None: `public`.
    pub(crate) schema: Option<ApiSchema>,
    /// How the layer's store sends its statements (unnamed behind a pooler in transaction
    /// mode): `complete_in` sends them the same way.
    pub(crate) mode: StatementMode,
}

impl RequestClaim {
    /// Completes the call inside the handler's transaction, with the answer the handler is
    /// about to return (its headers filtered as the layer's `replay_headers` and
    /// `private_headers` say; the API called in the layer's store's schema): the handler's
    /// writes and the remembered answer commit together, or
    /// neither does (a rollback leaves the call to run again). An answer the layer would
    /// not remember (5xx, an uncached 4xx, `Cache-Control: no-store`) records nothing and
    /// answers `Completed::Absent`; the layer releases the claim afterwards.
    pub async fn complete_in(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        response: &StoredResponse,
    ) -> pg_idempotency_client::Result<Completed> {
        let (succeeded, cache_failure) = match fate(response.status, &response.headers, &self.rule)
        {
            Fate::Succeeded => (true, None),
            Fate::CachedFailure => (false, Some(true)),
            Fate::Released(_) => return Ok(Completed::Absent),
        };
        self.in_transaction.store(true, Ordering::SeqCst);
        let store = PgStore::new(tx)
            .in_schema(&self.schema.clone().unwrap_or_default())
            .statement_mode(self.mode);
        // Only the headers a replay may carry are stored (no Set-Cookie, nothing private).
        let kept = response.kept(&self.headers);
        store
            .complete(
                &self.scope,
                &self.key,
                self.fence,
                Some(&kept.to_json()),
                succeeded,
                cache_failure,
            )
            .await
    }
}
