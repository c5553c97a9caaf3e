//! What every session of one proxy process shares: the configuration, the dispatcher over
//! the store, and the upstream server's name and address.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use anyhow::Result;
use pg_idempotency_client::{Dispatcher, IdempotencyStore, Idempotent, Tool, ToolSpec};

use crate::config::Config;
use crate::forward_tool::forward_tool;
use crate::recordings::Recordings;
use crate::upstream::Target;

/// How many scopes one dispatcher holds at most. The dispatcher names a record's scope by
/// the tool it dispatches, so each (tool, principal) pair is a registration; tools are
/// bounded by the upstream's listing, principals are not (a gateway's header can name
/// any), so the set is bounded here.
pub const MAX_REGISTERED: usize = 4096;

pub struct Proxy {
    pub config: Config,
    /// The upstream server's name: the first part of every scope.
    pub server: String,
    pub target: Target,
    store: Arc<dyn IdempotencyStore>,
    forward: Arc<dyn Tool>,
    registry: RwLock<Registry>,
    max_registered: usize,
    /// Calls answered whose results are still being recorded: waited for on exit.
    pub recordings: Recordings,
}

/// The dispatcher of the moment and the scopes registered with it. When the set is full,
/// a new dispatcher starts empty: the dispatcher has no way to forget one registration,
/// and calls under way keep the old one until they end. Every scope runs the same tool
/// with the call's own settings, so a fresh registration behaves as the old one did (only
/// the memory of begin answers lost on the wire, a speed-up for a retry after a broken
/// connection, starts over).
struct Registry {
    dispatcher: Arc<Dispatcher>,
    scopes: HashSet<String>,
}

impl Proxy {
    pub fn new(config: Config, target: Target, store: Arc<dyn IdempotencyStore>) -> Proxy {
        Proxy::with_max_registered(config, target, store, MAX_REGISTERED)
    }

    /// As `new`, with another bound on the registered scopes.
    pub fn with_max_registered(
        config: Config,
        target: Target,
        store: Arc<dyn IdempotencyStore>,
        max_registered: usize,
    ) -> Proxy {
        let server = config
            .upstream
            .name
            .clone()
            .unwrap_or_else(|| "upstream".into());
        Proxy {
            config,
            server,
            target,
            registry: RwLock::new(Registry {
                dispatcher: Arc::new(Dispatcher::new(store.clone())),
                scopes: HashSet::new(),
            }),
            store,
            forward: forward_tool(),
            max_registered: max_registered.max(1),
            recordings: Recordings::default(),
        }
    }

    /// The principal of a call nothing else names one for.
    pub fn default_principal(&self) -> Option<&str> {
        self.config.front.principal.as_deref()
    }

    /// The dispatcher `scope` is registered with (registered now if it was not): every
    /// scope runs the forwarding tool, and every call brings its own settings.
    pub fn dispatcher_for(&self, scope: &str) -> Result<Arc<Dispatcher>> {
        {
            let registry = self.registry.read().unwrap_or_else(|p| p.into_inner());
            if registry.scopes.contains(scope) {
                return Ok(registry.dispatcher.clone());
            }
        }
        let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
        if registry.scopes.contains(scope) {
            return Ok(registry.dispatcher.clone());
        }
        if registry.scopes.len() >= self.max_registered {
            tracing::info!(
                scopes = registry.scopes.len(),
                "the registered scopes reached their bound: a new dispatcher starts empty"
            );
            *registry = Registry {
                dispatcher: Arc::new(Dispatcher::new(self.store.clone())),
                scopes: HashSet::new(),
            };
        }
        registry
            .dispatcher
            .register(ToolSpec::new(scope, self.forward.clone()).idempotent(Idempotent::new()))?;
        registry.scopes.insert(scope.to_string());
        Ok(registry.dispatcher.clone())
    }

    /// How many scopes are registered now (never more than the bound).
    pub fn registered_count(&self) -> usize {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .scopes
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pg_idempotency_client::MemoryStore;

    fn proxy(max: usize) -> Proxy {
        let config: Config = toml::from_str("[upstream]\ncommand = \"true\"\n").unwrap();
        let target = Target::of(&config.upstream, &config.limits).unwrap();
        Proxy::with_max_registered(config, target, Arc::new(MemoryStore::new()), max)
    }

    #[test]
    fn registered_scopes_stay_within_the_bound() {
        let p = proxy(64);
        for i in 0..1000 {
            p.dispatcher_for(&crate::scope::scope_of("s", &format!("invented_{i}"), "p"))
                .unwrap();
            assert!(p.registered_count() <= 64);
        }
        // A scope already registered is not registered again.
        let s = crate::scope::scope_of("s", "send_email", "p");
        p.dispatcher_for(&s).unwrap();
        let n = p.registered_count();
        p.dispatcher_for(&s).unwrap();
        assert_eq!(p.registered_count(), n);
    }

    #[tokio::test]
    async fn a_registered_scope_dispatches_after_the_set_started_over() {
        let p = proxy(2);
        for tool in ["a", "b", "c"] {
            let d = p
                .dispatcher_for(&crate::scope::scope_of("s", tool, "p"))
                .unwrap();
            let names: Vec<String> = d.tools().into_iter().map(|t| t.name).collect();
            assert!(names.contains(&crate::scope::scope_of("s", tool, "p")));
        }
        assert_eq!(p.registered_count(), 1);
    }
}
