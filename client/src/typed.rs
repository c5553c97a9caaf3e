//! Typed tools: an async function of a `Deserialize` input to a `Serialize` output, made a
//! JSON tool. The input is decoded (and a bad one refused before anything is claimed), the
//! output encoded, any error made a `ToolError`; the input's JSON Schema comes from its type.

use std::error::Error as StdError;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::idempotent::Idempotent;
use crate::tool::{CallContext, FailureRecord, Tool, ToolError, ToolSpec};

type Running = Pin<Box<dyn Future<Output = std::result::Result<Value, ToolError>> + Send>>;

/// What a typed tool's function returns: `Result<O, E>`, `O` serializable, `E` any error
/// that boxes (`anyhow::Error`, `std::io::Error`, `Box<dyn Error + Send + Sync>`, a
/// `ToolError`, a `String`...).
#[diagnostic::on_unimplemented(
    message = "a typed tool returns `Result<O, E>`, not `{Self}`",
    label = "the tool's function returns this",
    note = "O: serde::Serialize; E: any error that converts into Box<dyn std::error::Error + Send + Sync> (anyhow::Error, std::io::Error, ToolError, String...)"
)]
pub trait ToolResult {
    fn into_tool_result(self) -> std::result::Result<Value, ToolError>;
}

impl<O, E> ToolResult for std::result::Result<O, E>
where
    O: Serialize,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
{
    fn into_tool_result(self) -> std::result::Result<Value, ToolError> {
        match self {
            Ok(output) => serde_json::to_value(output).map_err(|e| ToolError {
                kind: ErrorKind::Serialization,
                message: format!("the tool's output has no JSON form: {e}"),
                response: None,
                retryable: false,
                retry_after: None,
                record: FailureRecord::Policy,
            }),
            // A ToolError comes back out of its box as it went in: kind, response and all.
            Err(e) => Err(ToolError::of(e)),
        }
    }
}

/// An async function that can be a typed tool: `Fn(I) -> Fut` or `Fn(I, CallContext) ->
/// Fut`, `Fut` resolving to a [`ToolResult`]. `Args` tells the two shapes apart (it is
/// `(I,)` or `(I, CallContext)`), as axum's handlers do; it is always inferred.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a typed tool's function",
    label = "not a typed tool",
    note = "a typed tool is an async function of one Deserialize input (and optionally the CallContext) that returns Result<O, E>, and its future is Send; a closure's parameters need their types written: |input: SendEmail, ctx: CallContext| async move {{ .. }}"
)]
pub trait TypedFn<Args>: Send + Sync + 'static {
    /// What the tool's JSON input is decoded into.
    type Input: DeserializeOwned + Send + 'static;

    #[doc(hidden)]
    fn run(&self, input: Self::Input, ctx: CallContext) -> Running;
}

impl<F, Fut, I> TypedFn<(I,)> for F
where
    F: Fn(I) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: ToolResult,
    I: DeserializeOwned + Send + 'static,
{
    type Input = I;
    fn run(&self, input: I, _ctx: CallContext) -> Running {
        let running = self(input);
        Box::pin(async move { running.await.into_tool_result() })
    }
}

impl<F, Fut, I> TypedFn<(I, CallContext)> for F
where
    F: Fn(I, CallContext) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: ToolResult,
    I: DeserializeOwned + Send + 'static,
{
    type Input = I;
    fn run(&self, input: I, ctx: CallContext) -> Running {
        let running = self(input, ctx);
        Box::pin(async move { running.await.into_tool_result() })
    }
}

struct Typed<F, Args> {
    f: F,
    // fn() -> Args: the marker owns no Args, so the tool is Send and Sync whatever they are.
    shape: PhantomData<fn() -> Args>,
}

#[async_trait]
impl<F, Args> Tool for Typed<F, Args>
where
    F: TypedFn<Args>,
    Args: 'static,
{
    async fn call(&self, input: Value) -> std::result::Result<Value, ToolError> {
        self.call_with(input, CallContext::default()).await
    }

    async fn call_with(
        &self,
        input: Value,
        ctx: CallContext,
    ) -> std::result::Result<Value, ToolError> {
        // Through a dispatcher `check` has refused a bad input already; called directly, a
        // tool refuses it here, with the same kind.
        let input = F::Input::deserialize(input).map_err(|e| {
            let refused = refusal::<F::Input>(e);
            ToolError {
                kind: refused.kind,
                message: refused.to_string(),
                response: None,
                retryable: false,
                retry_after: None,
                record: FailureRecord::Policy,
            }
        })?;
        self.f.run(input, ctx).await
    }

    fn check(&self, input: &Value) -> Result<()> {
        F::Input::deserialize(input)
            .map(drop)
            .map_err(refusal::<F::Input>)
    }
}

/// A bad input, in the words of every refusal before a claim: what, why, what to do.
fn refusal<I>(e: serde_json::Error) -> Error {
    let type_name = std::any::type_name::<I>();
    let short = type_name.rsplit("::").next().unwrap_or(type_name);
    Error::invalid(format!("the input does not fit the tool's input type {short}"))
        .with_detail(e.to_string())
        .with_hint("Send a JSON value that matches the tool's input schema (Dispatcher::tool_infos lists each tool with its schema).")
}

/// A tool from a typed async function (`|input: SendEmail| async move { .. }` or `|input:
/// SendEmail, ctx: CallContext| ..`): its JSON input decoded into the function's input
/// type, a bad one refused before anything is claimed (`InvalidArgument`, by
/// [`Tool::check`]); its output encoded; its error, whatever it is, a [`ToolError`].
/// [`ToolSpec::typed`] also records the input's schema.
pub fn typed_tool<Args, F>(f: F) -> Arc<dyn Tool>
where
    F: TypedFn<Args>,
    Args: 'static,
{
    Arc::new(Typed {
        f,
        shape: PhantomData,
    })
}

/// The JSON Schema of a tool's input type, as an agent is shown it.
pub fn input_schema_of<I: JsonSchema>() -> Value {
    schemars::schema_for!(I).to_value()
}

impl ToolSpec {
    /// A typed tool (see [`typed_tool`]) named `name`, with its input's JSON Schema
    /// ([`ToolSpec::input_schema`]).
    pub fn typed<Args, F>(name: impl Into<String>, f: F) -> ToolSpec
    where
        F: TypedFn<Args>,
        F::Input: JsonSchema,
        Args: 'static,
    {
        ToolSpec::new(name, typed_tool(f)).input_schema(input_schema_of::<F::Input>())
    }
}

impl Idempotent {
    /// `KeyStrategy::Explicit` with a key supplier that reads the typed input: `|i:
    /// &CreateIssue| i.title.to_lowercase()`. It returns a `String`, or an `Option<String>`
    /// when some inputs have no key (refused, as a blank one is).
    pub fn typed_key_supplier<I, K, F>(self, f: F) -> Idempotent
    where
        I: DeserializeOwned,
        K: Into<Option<String>>,
        F: Fn(&I) -> K + Send + Sync + 'static,
    {
        self.key_supplier(move |input| I::deserialize(input).ok().and_then(|i| f(&i).into()))
    }
}

/// What a `#[tool]` function needs besides its input (a pool, an HTTP client), as its
/// first parameter: `async fn send_email(Shared(pool): Shared<Pool>, input: SendEmail)`.
/// `send_email_tool(pool)` then builds the tool, which calls the function with a clone of
/// it each time (so it is cheap to clone: a pool, an `Arc`), as axum's `State` does. (Not
/// `State`: that name is a record's state.)
///
/// ```no_run
/// use deadpool_postgres::Pool;
/// use pg_idempotency_client::{tool, CallContext, Dispatcher, PgStore, Shared};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Deserialize, schemars::JsonSchema)]
/// struct SendEmail {
///     /// The recipient's address.
///     to: String,
///     subject: String,
/// }
///
/// #[derive(Serialize)]
/// struct Sent {
///     email_id: i32,
/// }
///
/// /// Send an email.
/// #[tool(idempotent(ttl_secs = 86_400), required)]
/// async fn send_email(
///     Shared(pool): Shared<Pool>,
///     input: SendEmail,
///     ctx: CallContext,
/// ) -> anyhow::Result<Sent> {
///     ctx.ensure_lease()?;
///     let row = pool
///         .get()
///         .await?
///         .query_one(
///             "INSERT INTO outbox (recipient, subject) VALUES ($1, $2) RETURNING id",
///             &[&input.to, &input.subject],
///         )
///         .await?;
///     Ok(Sent { email_id: row.get(0) })
/// }
///
/// # fn agent(pool: Pool) -> pg_idempotency_client::Result<()> {
/// let agent = Dispatcher::new(std::sync::Arc::new(PgStore::new(pool.clone())));
/// agent.register(send_email_tool(pool))?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Shared<T>(pub T);
