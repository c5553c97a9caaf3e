//! What `#[tool]`'s expansion checks the user's types with, so that a wrong one is named
//! in the user's words at the user's code. Not part of the API.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::tool::CallContext;

#[diagnostic::on_unimplemented(
    message = "a tool's input `{Self}` must be serde::Deserialize and schemars::JsonSchema",
    label = "the tool's input type",
    note = "derive them: #[derive(serde::Deserialize, schemars::JsonSchema)]"
)]
pub trait ToolInput {}
impl<T: DeserializeOwned + JsonSchema + Send + 'static> ToolInput for T {}

pub fn is_tool_input<T: ToolInput>() {}

#[diagnostic::on_unimplemented(
    message = "the second parameter of a tool is its `CallContext`, not `{Self}`",
    label = "expected `pg_idempotency_client::CallContext`",
    note = "a tool takes its input, and may take its call's context: `async fn name(input: Input, ctx: CallContext)`"
)]
pub trait IsCallContext {}
impl IsCallContext for CallContext {}

pub fn is_call_context<T: IsCallContext>() {}

pub fn is_tool_result<T: crate::typed::ToolResult>() {}
