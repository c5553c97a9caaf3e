//! The executor: declared actions registered as tools of a dispatcher.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::action::Action;
use super::call_fingerprint::HeaderFingerprint;
use super::endpoint::Endpoint;
use super::headers::Headers;
use super::http_tool::{HttpTool, SharedClient};
use super::side_effect_of;
use crate::call::{Call, Dispatched};
use crate::dispatcher::Dispatcher;
use crate::error::Result;
use crate::idempotent::Idempotent;
use crate::resolve;
use crate::store::IdempotencyStore;
use crate::tool::{IdempotencyHint, ToolSpec};
use crate::toolkit::Toolkit;

/// An action's name and its header fingerprint, if it names headers.
type Named = (String, Option<HeaderFingerprint>);

/// Runs declared HTTP actions through an idempotency store.
pub struct WebExecutor {
    dispatcher: Dispatcher,
    http: SharedClient,
    /// What `with_defaults` gave the dispatcher, to layer a fingerprint over.
    defaults: Option<Idempotent>,
    /// The actions whose fingerprint takes header values, by name.
    header_fingerprints: RwLock<HashMap<String, Arc<HeaderFingerprint>>>,
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

    /// The default store: a new `MemoryStore` of its own (the Java framework's WEB_SERVICE
    /// actions keep their own in-memory store until given one). The first call of an
    /// action that requires idempotency logs one warning.
    pub fn in_memory() -> WebExecutor {
        WebExecutor::over(Dispatcher::in_memory())
    }

    fn over(dispatcher: Dispatcher) -> WebExecutor {
        WebExecutor {
            dispatcher,
            http: Arc::new(RwLock::new(reqwest::Client::new())),
            defaults: None,
            header_fingerprints: RwLock::default(),
        }
    }

    /// Sends every action's requests through this client: its authentication, TLS
    /// settings, timeouts, proxies and default headers (which an action's or a call's
    /// header of the same name replaces). Actions registered before use it too.
    pub fn with_http_client(self, client: reqwest::Client) -> WebExecutor {
        *self.http.write().unwrap_or_else(|p| p.into_inner()) = client;
        self
    }

    /// The settings of every action that has none of its own and no service's (settings on
    /// an action or a service replace these whole, unless they say
    /// `Idempotent::inherit_unset`). Reads are never deduplicated by these.
    pub fn with_defaults(mut self, idem: Idempotent) -> WebExecutor {
        self.dispatcher = self.dispatcher.with_defaults(idem.clone());
        self.defaults = Some(idem);
        self
    }

    /// The store calls are remembered in (one store can serve a `Dispatcher` too).
    pub fn store(&self) -> &Arc<dyn IdempotencyStore> {
        self.dispatcher.store()
    }

    pub fn register(&self, action: Action) -> Result<()> {
        let (spec, fingerprint) = self.tool_of(action, None)?;
        self.dispatcher.register(spec)?;
        self.remember(vec![fingerprint]);
        Ok(())
    }

    /// Registers one upstream service's actions: an action with settings of its own runs by
    /// them alone (the service's fill its unset fields only where it says
    /// `Idempotent::inherit_unset`), one without by the service's; a read only by its own.
    /// One refused action refuses them all.
    pub fn register_toolkit(&self, service: Toolkit<Action>) -> Result<()> {
        let (specs, fingerprints): (Vec<_>, Vec<_>) = service
            .members
            .into_iter()
            .map(|a| self.tool_of(a, service.idempotent.as_ref()))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        self.dispatcher.register_group(
            specs,
            service.idempotent.as_ref(),
            service.key_supplier.as_ref(),
        )?;
        self.remember(fingerprints);
        Ok(())
    }

    /// Keeps (or, for an action registered again without, drops) what computes the
    /// fingerprint of actions that name headers.
    fn remember(&self, fingerprints: Vec<Named>) {
        let mut known = self
            .header_fingerprints
            .write()
            .unwrap_or_else(|p| p.into_inner());
        for (name, fingerprint) in fingerprints {
            match fingerprint {
                Some(f) => known.insert(name, Arc::new(f)),
                None => known.remove(&name),
            };
        }
    }

    /// The action as a tool, and its header fingerprint if it names headers; refused when
    /// its headers or its endpoint's template are.
    fn tool_of(&self, action: Action, service: Option<&Idempotent>) -> Result<(ToolSpec, Named)> {
        let whose = format!("action {}", action.name);
        action.headers.check(&whose)?;
        let endpoint = Endpoint::parse(&action.name, &action.endpoint)?;
        let side_effect = side_effect_of(&action)?;
        let mut spec = ToolSpec::new(
            action.name.clone(),
            Arc::new(HttpTool {
                http: self.http.clone(),
                action: action.clone(),
                endpoint,
                side_effect,
            }),
        )
        .side_effect(side_effect)
        .hint(action.hint.unwrap_or(if side_effect {
            IdempotencyHint::Required
        } else {
            IdempotencyHint::BestEffort
        }));
        // An action that changes something is deduplicated without settings of its own
        // (that is what the executor is for, and the key it sends upstream lets the
        // provider deduplicate too): by its service's or the defaults where they exist,
        // else by HashInput. A read is deduplicated only by settings of its own.
        match action.idempotent.clone() {
            Some(p) => spec = spec.idempotent(p),
            None if side_effect && service.is_none() && self.defaults.is_none() => {
                spec = spec.idempotent(Idempotent::new())
            }
            None => {}
        }
        let (layered, _) = resolve::layer(
            spec.idempotent.as_ref(),
            service,
            self.defaults.as_ref(),
            !side_effect,
        );
        let fingerprint = HeaderFingerprint::of(&action, layered)?;
        Ok((spec, (action.name, fingerprint)))
    }

    pub async fn execute(&self, name: &str, input: Value) -> Result<Dispatched> {
        self.execute_call(name, input, Call::new()).await
    }

    /// As `execute`, with what this call alone carries: headers (a bearer token, say:
    /// `Headers::new().bearer(token)`, which converts into a `Call`), its own settings
    /// (`Call::new().idempotent(..).extension(headers)`). The headers are sent over the
    /// action's and never stored; a header refused by `Headers` refuses the call before
    /// anything is claimed or sent.
    ///
    /// ```no_run
    /// # use pg_idempotency_client::*;
    /// # use serde_json::json;
    /// # async fn demo(store: std::sync::Arc<dyn IdempotencyStore>, client: reqwest::Client, token: String) -> Result<()> {
    /// let web = WebExecutor::new(store).with_http_client(client);
    /// web.register(Action::new("update_customer", Method::POST, "https://api.example.com/v1/customers/{id}"))?;
    /// let input = json!({"id": "cus_42", "email": "ann@example.com"}); // id in the path only
    /// web.execute_call("update_customer", input, Headers::new().bearer(&token)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn execute_call(
        &self,
        name: &str,
        input: Value,
        call: impl Into<Call>,
    ) -> Result<Dispatched> {
        let mut call = call.into();
        if let Some(headers) = call.extensions.get::<Headers>() {
            headers.check("this call's headers")?;
        }
        let fingerprint = self
            .header_fingerprints
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        if let Some(f) = fingerprint {
            call = f.over(call);
        }
        self.dispatcher.dispatch_call(name, input, call).await
    }

    /// As `execute`, with this call's own settings over the action's (field by field).
    pub async fn execute_with(
        &self,
        name: &str,
        input: Value,
        call: &Idempotent,
    ) -> Result<Dispatched> {
        self.execute_call(name, input, Call::new().idempotent(call.clone()))
            .await
    }
}
