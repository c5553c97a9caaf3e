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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamKey {
    /// The record's upstream key (the default): a uuid minted when the call is first
    /// claimed, the same on every attempt and across takeovers, and unique per (owner,
    /// scope, key): two actions, or two roles, whose calls share a key send the provider
    /// two different keys. A new claim after the record is gone (it expired, was
    /// forgotten, or a failure that was not cached released it) mints a new one.
    #[default]
    Record,
    /// The bare call key. Hazard: a provider keys its memory on the `Idempotency-Key`
    /// alone (per account, not per endpoint), so two actions to one provider with the same
    /// explicit key (`create_order` and `cancel_order` keyed by an order id), the same
    /// input under HashInput, or two roles calling with one key, collide there: the second
    /// is refused (Stripe: "keys for idempotent requests can only be used with the same
    /// parameters") or answered with the first one's result. Choose it only where one
    /// action alone uses the provider's keys, or where the provider must see the same key
    /// from a process that lost its records (a restarted service on a `MemoryStore`).
    CallKey,
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
    /// None: Required for an action that changes something, best effort for a read.
    pub hint: Option<IdempotencyHint>,
    /// Whether it changes something upstream. None: by its method (GET, HEAD, OPTIONS and
    /// TRACE read; POST, PUT, PATCH and DELETE change something; any other method is
    /// refused by `register` until this says).
    pub side_effect: Option<bool>,
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
            upstream_key: UpstreamKey::Record,
            hint: None,
            side_effect: None,
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
    /// Whether the action changes something upstream, over what its method says: `true`
    /// treats it as POST (it carries `Idempotency-Key`, it is deduplicated without settings
    /// of its own), `false` as GET (no key; deduplicated only by settings of its own). A
    /// method other than GET, HEAD, OPTIONS, TRACE, POST, PUT, PATCH and DELETE (CONNECT,
    /// an extension method) needs it, or `register` refuses the action.
    pub fn side_effect(mut self, changes_something: bool) -> Action {
        self.side_effect = Some(changes_something);
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
