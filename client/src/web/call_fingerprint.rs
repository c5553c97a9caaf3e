//! The fingerprint of an action that names headers (`Action::fingerprint_headers`): what
//! its fingerprint rule compares, and those headers' values in this call. Headers are the
//! call's, not the input's, so the executor sets it per call as the call's own
//! `Fingerprint::of`, layered over the action's rule.

use http::header::{HeaderMap, HeaderName};
use serde_json::json;

use super::action::Action;
use super::headers::{self, Headers};
use crate::call::Call;
use crate::error::Result;
use crate::idempotent::{Fingerprint, Idempotent};

pub(crate) struct HeaderFingerprint {
    names: Vec<HeaderName>,
    /// The action's own headers, under the call's.
    action_headers: HeaderMap,
    /// The action's settings over its service's and the executor's defaults: the rule and
    /// strategy a call that sets neither runs with.
    layered: Idempotent,
}

impl HeaderFingerprint {
    /// None for an action that names no headers; refused (at registration) for a name
    /// that is not a header name.
    pub(crate) fn of(action: &Action, layered: Idempotent) -> Result<Option<HeaderFingerprint>> {
        if action.fingerprint_headers.is_empty() {
            return Ok(None);
        }
        let names = action
            .fingerprint_headers
            .iter()
            .map(|n| headers::fingerprint_name(&action.name, n))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(HeaderFingerprint {
            names,
            action_headers: action.headers.map().clone(),
            layered,
        }))
    }

    /// The call with its fingerprint: `{"input": what the rule in force compares, or null,
    /// "headers": {name: value, or null when missing}}`.
    pub(crate) fn over(&self, mut call: Call) -> Call {
        let own = call.idempotent.clone().unwrap_or_default();
        let settled = own.or(&self.layered);
        let rule = settled.fingerprint_rule();
        let strategy = settled.key_strategy();
        let sent = match call.extensions.get::<Headers>() {
            Some(h) => h.over(&self.action_headers),
            None => self.action_headers.clone(),
        };
        let values = headers::values_of(&self.names, &sent);
        let fingerprint = Fingerprint::of(
            move |input| json!({"input": rule.request(&strategy, input), "headers": values}),
        );
        call.idempotent = Some(own.fingerprint(fingerprint));
        call
    }
}
