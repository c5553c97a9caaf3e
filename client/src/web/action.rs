//! A declared HTTP action: where it goes, how its input travels, which key goes upstream.

use reqwest::Method;

use crate::idempotent::Idempotent;
use crate::tool::IdempotencyHint;

/// Where an action puts its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Params {
    /// As a JSON body.
    Body,
    /// As query parameters (each top-level field of an object input).
    Query,
}

/// Which key goes upstream as `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKey {
    /// The call's own key.
    CallKey,
    /// The record's upstream key: a uuid, the same across takeovers.
    Record,
}

/// A declared HTTP action.
#[derive(Debug, Clone)]
pub struct Action {
    pub name: String,
    pub method: Method,
    pub endpoint: String,
    pub params: Params,
    pub idempotent: Option<Idempotent>,
    pub upstream_key: UpstreamKey,
    /// None: Required for POST, PUT, PATCH and DELETE, best effort for the others.
    pub hint: Option<IdempotencyHint>,
}

impl Action {
    pub fn new(name: impl Into<String>, method: Method, endpoint: impl Into<String>) -> Action {
        Action {
            name: name.into(),
            method,
            endpoint: endpoint.into(),
            params: Params::Body,
            idempotent: None,
            upstream_key: UpstreamKey::CallKey,
            hint: None,
        }
    }
    pub fn params(mut self, params: Params) -> Action {
        self.params = params;
        self
    }
    pub fn idempotent(mut self, idempotent: Idempotent) -> Action {
        self.idempotent = Some(idempotent);
        self
    }
    pub fn upstream_key(mut self, which: UpstreamKey) -> Action {
        self.upstream_key = which;
        self
    }
    /// A POST under `KeyStrategy::Uuid` (a fresh key per call, deduplicated by the provider
    /// only) must say it does not require deduplication here: `IdempotencyHint::BestEffort`.
    pub fn hint(mut self, hint: IdempotencyHint) -> Action {
        self.hint = Some(hint);
        self
    }
}
