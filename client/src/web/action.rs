//! A declared HTTP action: where it goes, how its input travels, which key goes upstream,
//! which headers it sends.

use reqwest::Method;

use super::headers::Headers;

use crate::idempotent::Idempotent;
use crate::tool::IdempotencyHint;
use crate::toolkit::Toolkit;

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
    /// The URL; `{name}` in its path is filled from the input's field `name`.
    pub endpoint: String,
    pub params: Params,
    pub idempotent: Option<Idempotent>,
    pub upstream_key: UpstreamKey,
    /// None: Required for POST, PUT, PATCH and DELETE, best effort for the others.
    pub hint: Option<IdempotencyHint>,
    /// Sent with every request of the action, over the HTTP client's defaults.
    pub headers: Headers,
    /// Headers whose values join the fingerprint a repeat is compared on.
    pub fingerprint_headers: Vec<String>,
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
            headers: Headers::new(),
            fingerprint_headers: Vec::new(),
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

    /// A header sent with every request of the action (an API version, a static key); a
    /// call's header of the same name replaces it. A name or value HTTP cannot carry, and
    /// `Idempotency-Key`, are refused by `register`.
    pub fn header(mut self, name: impl AsRef<str>, value: impl AsRef<[u8]>) -> Action {
        self.headers = self.headers.header(name, value);
        self
    }
    /// Headers (the action's or the call's) whose values a repeat must match too, beside
    /// what the fingerprint rule compares: under the same key, another `Stripe-Account`
    /// is a mismatch instead of a replay of the other account's answer. A missing header
    /// counts as null. Headers join neither the key nor the fingerprint otherwise.
    pub fn fingerprint_headers<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Action {
        self.fingerprint_headers = names.into_iter().map(Into::into).collect();
        self
    }
}

impl Toolkit<Action> {
    /// The actions of one upstream service, for
    /// [`WebExecutor::register_toolkit`](crate::WebExecutor::register_toolkit).
    pub fn service(name: impl Into<String>) -> Toolkit<Action> {
        Toolkit::named(name)
    }

    pub fn action(mut self, action: Action) -> Toolkit<Action> {
        self.members.push(action);
        self
    }
}
