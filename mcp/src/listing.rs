//! `tools/list` as the front client sees it: each tool as the upstream server listed it,
//! with the proxy's decision in its `_meta` (`pg-idempotency/policy`), and a sentence at the
//! end of a deduplicated tool's description, so that a model knows a retry is safe.
//!
//! And the tools a session may call: those the upstream server listed. A name it never
//! listed is refused before the store is touched, so that a client cannot make records,
//! registrations or scopes for tools that do not exist.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rmcp::model::{ErrorData, Tool};
use serde_json::json;

use crate::policy::{Decision, Why};

pub const POLICY: &str = "pg-idempotency/policy";
pub const SUFFIX: &str = " (Safe to retry: a repeat of the same call, same arguments or same idempotency key, returns the first call's result instead of running again.)";

/// How often a session lists the upstream's tools again at most, when a call names a
/// tool it does not know: a tool added upstream is found that soon, and a client naming
/// tools at random costs the upstream one listing per interval, not one per call.
pub const RELIST_EVERY: Duration = Duration::from_secs(2);

/// The MCP specification's (2025-11-25) rules for a tool name: 1 to 128 characters of
/// A-Z, a-z, 0-9, `_`, `-` and `.`.
pub const NAME_MAX: usize = 128;

pub fn valid_name(name: &str) -> bool {
    (1..=NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// The tools the upstream server listed to one session, with each one's read-only hint.
#[derive(Default)]
pub struct Listed {
    tools: HashMap<String, Option<bool>>,
    /// When the session last listed again (or started to) for a name it did not know.
    relisted: Option<Instant>,
}

impl Listed {
    /// The tool's read-only hint (None inside: listed without one); None: not listed.
    pub fn hint(&self, name: &str) -> Option<Option<bool>> {
        self.tools.get(name).cloned()
    }

    /// Adds tools as a page of `tools/list` showed them.
    pub fn remember(&mut self, tools: &[Tool]) {
        for t in tools {
            self.tools.insert(
                t.name.to_string(),
                t.annotations.as_ref().and_then(|a| a.read_only_hint),
            );
        }
    }

    /// The whole listing, in place of what was known (a tool the server dropped is gone).
    pub fn replace(&mut self, tools: &[Tool]) {
        self.tools.clear();
        self.remember(tools);
    }

    /// Whether the session has the server's listing (one `tools/list` page at least).
    pub fn ever_listed(&self) -> bool {
        self.relisted.is_some() || !self.tools.is_empty()
    }

    /// Whether a listing may start now; if so, it is counted as started, so that calls
    /// that miss together list once.
    pub fn claim_relist(&mut self, now: Instant) -> bool {
        match self.relisted {
            Some(at) if now.duration_since(at) < RELIST_EVERY => false,
            _ => {
                self.relisted = Some(now);
                true
            }
        }
    }
}

/// A `tools/call` of a name the upstream server does not list (the specification's
/// answer: invalid params).
pub fn unknown_tool(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("the upstream server lists no tool named {name}"),
        Some(json!({
            "kind": "unknown_tool",
            "tool": name,
            "hint": format!("Call tools/list for the tools this server has; a tool added to it is found within {} s.", RELIST_EVERY.as_secs()),
        })),
    )
}

/// A `tools/call` of a name outside the specification's rules that the server does not
/// list either. The name is not repeated: it may be anything.
pub fn invalid_tool_name(name: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "the tool name is not one the upstream server lists, nor a valid tool name ({} bytes)",
            name.len()
        ),
        Some(json!({
            "kind": "invalid_tool_name",
            "hint": "A tool name is 1 to 128 characters of A-Z, a-z, 0-9, _, - and . (MCP 2025-11-25); call tools/list for the tools this server has.",
        })),
    )
}

pub fn show(tool: &mut Tool, decision: &Decision) {
    let (deduplicated, why) = match decision {
        Decision::Pass { why } => (false, *why),
        Decision::Dedupe { why, .. } => (true, *why),
    };
    let why = match why {
        Why::Config => "config",
        Why::ReadOnlyHint => "readOnlyHint",
        Why::NoReadOnlyHint => "no readOnlyHint",
    };
    let mut meta = tool.meta.take().unwrap_or_default();
    meta.0.insert(
        POLICY.into(),
        json!({"deduplicated": deduplicated, "decidedBy": why}),
    );
    tool.meta = Some(meta);
    if deduplicated {
        let description = tool.description.take().unwrap_or_default();
        tool.description = Some(
            format!("{description}{SUFFIX}")
                .trim_start()
                .to_string()
                .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_the_specification() {
        for ok in [
            "getUser",
            "DATA_EXPORT_v2",
            "admin.tools.list",
            "a-b",
            &"x".repeat(128),
        ] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "send_email@alice",
            "a b",
            "a/b",
            "a,b",
            "é",
            "a\0",
            &"x".repeat(129),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn one_listing_per_interval() {
        let mut l = Listed::default();
        let t0 = Instant::now();
        assert!(l.claim_relist(t0));
        assert!(!l.claim_relist(t0 + Duration::from_millis(10)));
        assert!(l.claim_relist(t0 + RELIST_EVERY));
    }
}
