//! What `IdempotencyLayer`'s builder sets and every request reads (the service, a claimed
//! request's run): apart from the layer, so that its readers do not depend on it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use pg_idempotency_client::IdempotencyStore;

use crate::headers::ReplayHeaders;
use crate::rule::Rule;
use crate::scope::ScopeFn;

/// The layer's settings, shared by every request.
pub(crate) struct LayerSettings {
    pub store: Arc<dyn IdempotencyStore>,
    pub scope_of: Box<ScopeFn>,
    pub rules: HashMap<String, Rule>,
    pub default_rule: Rule,
    pub methods: Vec<Method>,
    pub wait: Duration,
    pub lease: Option<Duration>,
    pub ttl: Option<Duration>,
    pub max_key_bytes: usize,
    pub max_scope_bytes: usize,
    pub max_body_bytes: usize,
    pub max_response_bytes: usize,
    pub mismatch_status: StatusCode,
    pub fail_open: bool,
    pub store_timeout: Duration,
    pub unavailable_retry_after: Duration,
    /// The response headers stored and replayed (shared with each request's claim, whose
    /// `complete_in` stores what the handler built).
    pub headers: Arc<ReplayHeaders>,
}

impl LayerSettings {
    pub fn rule_for(&self, route: &str) -> Rule {
        self.rules.get(route).copied().unwrap_or(self.default_rule)
    }
}
