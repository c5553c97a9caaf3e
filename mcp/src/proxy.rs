//! What every session of one proxy process shares: the configuration, the dispatcher over
//! the store, and the upstream server's name and address.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use anyhow::Result;
use idempotency::{Dispatcher, IdempotencyStore, Idempotent, Tool, ToolSpec};

use crate::config::Config;
use crate::forward_tool::forward_tool;
use crate::upstream::Target;

pub struct Proxy {
    pub config: Config,
    /// The upstream server's name: the first part of every scope.
    pub server: String,
    pub target: Target,
    pub dispatcher: Dispatcher,
    forward: Arc<dyn Tool>,
    registered: RwLock<HashSet<String>>,
}

impl Proxy {
    pub fn new(config: Config, target: Target, store: Arc<dyn IdempotencyStore>) -> Proxy {
        let server = config
            .upstream
            .name
            .clone()
            .unwrap_or_else(|| "upstream".into());
        Proxy {
            config,
            server,
            target,
            dispatcher: Dispatcher::new(store),
            forward: forward_tool(),
            registered: RwLock::default(),
        }
    }

    /// The principal of a call nothing else names one for.
    pub fn default_principal(&self) -> Option<&str> {
        self.config.front.principal.as_deref()
    }

    /// Registers `scope` with the dispatcher once: every scope runs the forwarding tool,
    /// and every call brings its own settings.
    pub fn ensure_registered(&self, scope: &str) -> Result<()> {
        if self
            .registered
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(scope)
        {
            return Ok(());
        }
        self.dispatcher
            .register(ToolSpec::new(scope, self.forward.clone()).idempotent(Idempotent::new()))?;
        self.registered
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(scope.to_string());
        Ok(())
    }
}
