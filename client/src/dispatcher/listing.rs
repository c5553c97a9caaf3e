//! What an agent runtime is shown of a dispatcher's tools: each tool's name, description
//! and input schema, as an MCP `tools/list` answer carries them, and whether its calls are
//! deduplicated.

use serde::Serialize;
use serde_json::Value;

use super::{settle, Dispatcher};

/// One registered tool, as an agent is shown it. Serialized with MCP's field names
/// (`name`, `description`, `inputSchema`), so that a list of them answers `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of its input (a typed tool's comes from its input type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// Whether a repeat of a call is answered from the store (its settings, its toolkit's
    /// or the dispatcher's defaults resolve to HashInput or Explicit) rather than run again.
    pub deduplicated: bool,
}

impl Dispatcher {
    /// The registered tools as an agent is shown them, by name.
    pub fn tool_infos(&self) -> Vec<ToolInfo> {
        let tools = self.tools.read().unwrap_or_else(|p| p.into_inner());
        let mut infos: Vec<ToolInfo> = tools
            .values()
            .map(|reg| ToolInfo {
                name: reg.spec.name.clone(),
                description: reg.spec.description.clone(),
                input_schema: reg.spec.input_schema.clone(),
                // register() settled every tool already; one that fails now deduplicates nothing.
                deduplicated: settle(reg, None)
                    .is_ok_and(|idem| idem.key_strategy().deduplicates()),
            })
            .collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        infos
    }
}
