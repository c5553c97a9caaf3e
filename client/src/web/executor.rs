//! The executor: declared actions registered as tools of a dispatcher.

use std::sync::Arc;

use serde_json::Value;

use super::action::Action;
use super::http_tool::HttpTool;
use super::unsafe_method;
use crate::dispatcher::{Dispatched, Dispatcher, IdempotencyHint, ToolSpec};
use crate::error::Result;
use crate::idempotent::Idempotent;
use crate::store::IdempotencyStore;

/// Runs declared HTTP actions through an idempotency store.
pub struct WebExecutor {
    dispatcher: Dispatcher,
    http: reqwest::Client,
}

impl WebExecutor {
    pub fn new(store: Arc<dyn IdempotencyStore>) -> WebExecutor {
        WebExecutor {
            dispatcher: Dispatcher::new(store),
            http: reqwest::Client::new(),
        }
    }

    pub fn with_defaults(mut self, idem: Idempotent) -> WebExecutor {
        self.dispatcher = self.dispatcher.with_defaults(idem);
        self
    }

    pub fn register(&self, action: Action) -> Result<()> {
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
        if let Some(p) = action.idempotent {
            spec = spec.idempotent(p);
        }
        self.dispatcher.register(spec)
    }

    pub async fn execute(&self, name: &str, input: Value) -> Result<Dispatched> {
        self.dispatcher.dispatch(name, input).await
    }
}
