//! A toolkit: tools (or one upstream service's web actions) registered together under one
//! `Idempotent` and one key supplier, as the Java framework's `@Idempotent` on a class that
//! implements `IdempotencyKeySupplier`. "The method wins": a tool's own settings replace its
//! toolkit's whole; field by field only where the tool says `Idempotent::inherit_unset`.

use serde_json::Value;
use std::sync::Arc;

use crate::idempotent::{Idempotent, KeySupplier};
use crate::tool::ToolSpec;

/// Members (`ToolSpec`s for a [`Dispatcher`](crate::Dispatcher), `Action`s for a
/// [`WebExecutor`](crate::WebExecutor)) that share settings:
///
/// ```
/// # use pg_idempotency_client::*;
/// # use serde_json::json;
/// # use std::time::Duration;
/// let issues = Toolkit::new("issue_tools")
///     .key_supplier(|input| input["title"].as_str().map(str::to_lowercase))
///     .tool(
///         ToolSpec::new("create_issue", tool_fn(|_| async { Ok(json!("created")) }))
///             .idempotent(Idempotent::new().explicit().ttl(Duration::from_secs(86_400))),
///     )
///     .tool(
///         ToolSpec::new("place_order", tool_fn(|_| async { Ok(json!("ordered")) }))
///             .idempotent(Idempotent::new().cache_failures(true).on_cache_hit(OnCacheHit::FailFast)),
///     );
/// Dispatcher::in_memory().register_toolkit(issues).unwrap();
/// ```
#[derive(Clone)]
pub struct Toolkit<T = ToolSpec> {
    pub name: String,
    /// The settings of members without their own. Some also means every member with a side
    /// effect is deduplicated (HashInput unless a level names a strategy); None, only
    /// members with settings of their own are.
    pub idempotent: Option<Idempotent>,
    /// The key of its members whose strategy is `KeyStrategy::Explicit(None)`.
    pub key_supplier: Option<KeySupplier>,
    pub members: Vec<T>,
}

impl<T> Toolkit<T> {
    pub(crate) fn named(name: impl Into<String>) -> Toolkit<T> {
        Toolkit {
            name: name.into(),
            idempotent: None,
            key_supplier: None,
            members: Vec::new(),
        }
    }

    /// The settings of its members that have none of their own (a member's own replace
    /// these whole, unless they say `Idempotent::inherit_unset`). Read-only members are not
    /// deduplicated by these: only by settings of their own.
    pub fn idempotent(mut self, idempotent: Idempotent) -> Toolkit<T> {
        self.idempotent = Some(idempotent);
        self
    }

    /// The Java framework's `IdempotencyKeySupplier`: names the calls of members whose strategy
    /// is Explicit without a supplier of their own (`Idempotent::explicit()`). It must
    /// return a non-blank key, or the call fails with InvalidArgument.
    pub fn key_supplier(
        mut self,
        f: impl Fn(&Value) -> Option<String> + Send + Sync + 'static,
    ) -> Toolkit<T> {
        self.key_supplier = Some(Arc::new(f));
        self
    }
}

impl Toolkit<ToolSpec> {
    /// A toolkit of tools, for [`Dispatcher::register_toolkit`](crate::Dispatcher::register_toolkit).
    pub fn new(name: impl Into<String>) -> Toolkit<ToolSpec> {
        Toolkit::named(name)
    }

    pub fn tool(mut self, spec: ToolSpec) -> Toolkit<ToolSpec> {
        self.members.push(spec);
        self
    }
}

// A toolkit of web actions (`Toolkit::service`) is built in web/action.rs, beside the
// `Action` it holds: the tool model does not depend on the web executor.

impl<T> std::fmt::Debug for Toolkit<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolkit")
            .field("name", &self.name)
            .field("idempotent", &self.idempotent)
            .field("key_supplier", &self.key_supplier.is_some())
            .field("members", &self.members.len())
            .finish()
    }
}
