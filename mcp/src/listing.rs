//! `tools/list` as the front client sees it: each tool as the upstream server listed it,
//! with the proxy's decision in its `_meta` (`pg-idempotency/policy`: whether it is
//! deduplicated and why, how old a result it can be answered with, what a takeover of a
//! call that may have acted does), and a sentence at the end of a deduplicated tool's
//! description, so that a model knows a retry is safe.
//!
//! And the tools a session may call: those the upstream server listed. A name it never
//! listed is refused before the store is touched, so that a client cannot make records,
//! registrations or scopes for tools that do not exist.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{ErrorData, Tool};
use serde_json::json;

use crate::policy::{Decision, Hints, Policy, Unknown, UnknownBy, Why};

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

/// The tools the upstream server listed to one session, with each one's hints.
#[derive(Default)]
pub struct Listed {
    tools: HashMap<String, Hints>,
    /// When the session last listed again (or started to) for a name it did not know.
    relisted: Option<Instant>,
}

impl Listed {
    /// The tool's hints; None: not listed.
    pub fn hint(&self, name: &str) -> Option<Hints> {
        self.tools.get(name).copied()
    }

    /// Adds tools as a page of `tools/list` showed them.
    pub fn remember(&mut self, tools: &[Tool]) {
        for t in tools {
            self.tools
                .insert(t.name.to_string(), Hints::of(t.annotations.as_ref()));
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

/// What a deduplicated tool without a configured `ttl` is answered with at most: the
/// store decides (the scope's policy, else the server's setting), which the proxy does not
/// read, so the listing names where the bound comes from.
pub const STORE_TTL: &str =
    "the store's ttl: the scope's policy (idem_set_policy), else pg_idempotency.default_ttl (1h unless changed)";

pub fn show(tool: &mut Tool, decision: &Decision) {
    let shown = match decision {
        Decision::Pass { why } => {
            if *why == Why::NoAnnotations {
                warn_unprotected(&tool.name);
            }
            json!({
                "deduplicated": false,
                "decidedBy": why_of(*why),
                // Every call runs: no answer is older than the call.
                "replaysFor": "0s",
            })
        }
        Decision::Dedupe { policy, why } => {
            let mut shown = json!({
                "deduplicated": true,
                "decidedBy": why_of(*why),
                "replaysFor": replays_for(policy),
                "onUnknownOutcome": unknown_of(&policy.on_unknown_outcome),
                "onUnknownOutcomeDecidedBy": match policy.on_unknown_outcome_by {
                    UnknownBy::Config => "config",
                    UnknownBy::IdempotentHint => "idempotentHint",
                    UnknownBy::Default => "default",
                },
            });
            if let Unknown::Reconcile(rule) = &policy.on_unknown_outcome {
                shown["reconcileWith"] = json!(rule.tool);
            }
            shown
        }
    };
    let deduplicated = matches!(decision, Decision::Dedupe { .. });
    let mut meta = tool.meta.take().unwrap_or_default();
    meta.0.insert(POLICY.into(), shown);
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

fn why_of(why: Why) -> &'static str {
    match why {
        Why::Config => "config",
        Why::ReadOnlyHint => "readOnlyHint",
        Why::IdempotentHint => "idempotentHint",
        Why::AnnotatedEffect => "annotated effect",
        Why::NoAnnotations => "no annotations",
    }
}

/// How old a result a repeat can be answered with: the record's ttl.
fn replays_for(policy: &Policy) -> String {
    match policy.ttl {
        Some(ttl) => written(ttl),
        None => STORE_TTL.into(),
    }
}

/// A duration in the configuration's units, the largest that writes it whole.
fn written(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

fn unknown_of(unknown: &Unknown) -> &'static str {
    match unknown {
        Unknown::Rerun => "rerun",
        Unknown::Refuse => "refuse",
        Unknown::Reconcile(_) => "reconcile",
    }
}

/// Tool names already warned about, so that every session's listing does not repeat it.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// At most this many names are remembered: a server listing more is warned about again.
const WARNED_MAX: usize = 4096;

/// A tool passed because its server said nothing of its effects: the operator is told
/// once, since a write among them runs again on every retry until it is named.
fn warn_unprotected(name: &str) {
    let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if warned.len() >= WARNED_MAX {
        warned.clear();
    }
    if warned.insert(name.to_string()) {
        tracing::warn!(
            tool = name,
            "the upstream server lists this tool with no annotations: its calls pass through, not deduplicated; if it has an effect, name it: [tools.{name:?}] mode = \"dedupe\" (or [defaults] mode = \"dedupe\" with mode = \"pass\" for its reads)"
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
    fn ttls_written_as_configured() {
        assert_eq!(written(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(written(Duration::from_secs(3600)), "1h");
        assert_eq!(written(Duration::from_secs(90)), "90s");
        assert_eq!(written(Duration::from_millis(1500)), "1500ms");
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
