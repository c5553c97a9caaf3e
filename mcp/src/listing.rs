//! `tools/list` as the front client sees it: each tool as the upstream server listed it,
//! with the proxy's decision in its `_meta` (`pg-idempotency/policy`), and a sentence at the
//! end of a deduplicated tool's description, so that a model knows a retry is safe.

use rmcp::model::Tool;
use serde_json::json;

use crate::policy::{Decision, Why};

pub const POLICY: &str = "pg-idempotency/policy";
pub const SUFFIX: &str = " (Safe to retry: a repeat of the same call, same arguments or same idempotency key, returns the first call's result instead of running again.)";

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
