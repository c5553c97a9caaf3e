//! The executor: declared actions registered as tools of a dispatcher.

use std::sync::Arc;

use serde_json::Value;

use super::action::Action;
use super::http_tool::HttpTool;
use super::unsafe_method;
use crate::dispatcher::{Dispatched, Dispatcher};
use crate::error::Result;
use crate::idempotent::Idempotent;
use crate::store::IdempotencyStore;
use crate::tool::{IdempotencyHint, ToolSpec};
use crate::toolkit::Toolkit;

/// Runs declared HTTP actions through an idempotency store.
pub struct WebExecutor {
    dispatcher: Dispatcher,
    http: reqwest::Client,
}

impl Default for WebExecutor {
    /// On a [`MemoryStore`](crate::MemoryStore), as [`WebExecutor::in_memory`].
    fn default() -> WebExecutor {
        WebExecutor::in_memory()
    }
}

impl WebExecutor {
    pub fn new(store: Arc<dyn IdempotencyStore>) -> WebExecutor {
        WebExecutor::over(Dispatcher::new(store))
    }

    /// The default store: a new `MemoryStore` of its own (the framework's WEB_SERVICE
    /// actions keep their own in-memory store until given one). The first call of an
    /// action that requires idempotency logs one warning.
    pub fn in_memory() -> WebExecutor {
        WebExecutor::over(Dispatcher::in_memory())
    }

    fn over(dispatcher: Dispatcher) -> WebExecutor {
        WebExecutor {
            dispatcher,
            http: reqwest::Client::new(),
        }
    }

    /// What every action leaves unset, below its service's settings (field by field).
    pub fn with_defaults(mut self, idem: Idempotent) -> WebExecutor {
        self.dispatcher = self.dispatcher.with_defaults(idem);
        self
    }

    pub fn register(&self, action: Action) -> Result<()> {
        self.dispatcher.register(self.tool_of(action))
    }

    /// Registers one upstream service's actions, each with its own settings over the
    /// service's, field by field. One refused action refuses them all.
    pub fn register_toolkit(&self, service: Toolkit<Action>) -> Result<()> {
        let specs = service
            .members
            .into_iter()
            .map(|a| self.tool_of(a))
            .collect();
        self.dispatcher.register_group(
            specs,
            service.idempotent.as_ref(),
            service.key_supplier.as_ref(),
        )
    }

    fn tool_of(&self, action: Action) -> ToolSpec {
        let side_effect = unsafe_method(&action.method);
        let mut spec = ToolSpec::new(
            action.name.clone(),
            Arc::new(HttpTool {
                http: self.http.clone(),
                action: action.clone(),
            }),
        )
        .side_effect(side_effect)
        .hint(action.hint.unwrap_or(if side_effect {
            IdempotencyHint::Required
        } else {
            IdempotencyHint::BestEffort
        }));
        // A method that changes something is deduplicated without settings of its own
        // (that is what the executor is for, and the key it sends upstream lets the
        // provider deduplicate too); a read is not, unless a level gives it settings.
        match action.idempotent {
            Some(p) => spec = spec.idempotent(p),
            None if side_effect => spec = spec.idempotent(Idempotent::new()),
            None => {}
        }
        spec
    }

    pub async fn execute(&self, name: &str, input: Value) -> Result<Dispatched> {
        self.dispatcher.dispatch(name, input).await
    }

    /// As `execute`, with this call's own settings over the action's (field by field).
    pub async fn execute_with(
        &self,
        name: &str,
        input: Value,
        call: &Idempotent,
    ) -> Result<Dispatched> {
        self.dispatcher.dispatch_with(name, input, call).await
    }
}
