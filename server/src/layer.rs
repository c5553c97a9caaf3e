//! The layer: a builder of its settings (settings.rs), and the tower `Layer` that hands
//! them to each service.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use pg_idempotency_client::IdempotencyStore;
use pg_idempotency_protocol::settings::MAX_SCOPE_BYTES;
use tower_layer::Layer;

use crate::headers::ReplayHeaders;
use crate::rule::Rule;
use crate::scope::Scope;
use crate::service::IdempotencyService;
use crate::settings::LayerSettings;

/// A tower layer that makes the requests of its routes idempotent under `Idempotency-Key`.
#[derive(Clone)]
pub struct IdempotencyLayer {
    settings: Arc<LayerSettings>,
}

impl IdempotencyLayer {
    /// Over `store`, with `scope_of` naming each request's caller and route template.
    pub fn new(
        store: Arc<dyn IdempotencyStore>,
        scope_of: impl Fn(&http::request::Parts) -> Option<Scope> + Send + Sync + 'static,
    ) -> IdempotencyLayer {
        IdempotencyLayer {
            settings: Arc::new(LayerSettings {
                store,
                scope_of: Box::new(scope_of),
                rules: HashMap::new(),
                default_rule: Rule::default(),
                methods: vec![Method::POST, Method::PUT, Method::PATCH, Method::DELETE],
                wait: Duration::ZERO,
                lease: None,
                ttl: None,
                max_key_bytes: 255,
                max_scope_bytes: MAX_SCOPE_BYTES.default as usize,
                max_body_bytes: 1 << 20,
                max_response_bytes: 256 << 10,
                mismatch_status: StatusCode::UNPROCESSABLE_ENTITY,
                fail_open: false,
                store_timeout: Duration::from_secs(5),
                unavailable_retry_after: Duration::from_secs(1),
                headers: Arc::new(ReplayHeaders::default()),
            }),
        }
    }

    fn with(mut self, change: impl FnOnce(&mut LayerSettings)) -> IdempotencyLayer {
        let settings = Arc::get_mut(&mut self.settings)
            .expect("an IdempotencyLayer is configured before it is cloned");
        change(settings);
        self
    }

    /// The rule of one route template (as `Scope::route` names it).
    pub fn rule(self, route: impl Into<String>, rule: Rule) -> IdempotencyLayer {
        let route = route.into();
        self.with(|s| {
            s.rules.insert(route, rule);
        })
    }

    /// The rule of routes without one of their own (default: optional, 4xx cached).
    pub fn default_rule(self, rule: Rule) -> IdempotencyLayer {
        self.with(|s| s.default_rule = rule)
    }

    /// The methods the layer keys (default POST, PUT, PATCH, DELETE).
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> IdempotencyLayer {
        let methods = methods.into_iter().collect();
        self.with(|s| s.methods = methods)
    }

    /// How long a duplicate waits for the running request's answer (then replays it)
    /// before answering 409. Each waiting duplicate holds a connection of the store's
    /// pool while it waits: the pool needs room for them and for the completions they
    /// wait for.
    pub fn wait(self, wait: Duration) -> IdempotencyLayer {
        self.with(|s| s.wait = wait)
    }

    /// The claim's lease (None: the scope's policy, then the server's default); the layer
    /// extends it while the handler runs.
    pub fn lease(self, lease: Duration) -> IdempotencyLayer {
        self.with(|s| s.lease = Some(lease))
    }

    /// How long an answer is remembered (None: the scope's policy, then the server's).
    pub fn ttl(self, ttl: Duration) -> IdempotencyLayer {
        self.with(|s| s.ttl = Some(ttl))
    }

    /// The longest key accepted (default 255 bytes, Stripe's); longer: 400.
    pub fn max_key_bytes(self, n: usize) -> IdempotencyLayer {
        self.with(|s| s.max_key_bytes = n)
    }

    /// The store's `pg_idempotency.max_scope_bytes` (default 128): longer scopes are hashed.
    pub fn max_scope_bytes(self, n: usize) -> IdempotencyLayer {
        self.with(|s| s.max_scope_bytes = n)
    }

    /// The largest request body buffered for the fingerprint (default 1 MiB); larger: 413.
    pub fn max_body_bytes(self, n: usize) -> IdempotencyLayer {
        self.with(|s| s.max_body_bytes = n)
    }

    /// The largest answer remembered (default 256 KiB); larger ones are forwarded as they
    /// come and released. Keep it under the server's `pg_idempotency.max_response_bytes`
    /// (the stored form is base64 in JSON, a third larger).
    pub fn max_response_bytes(self, n: usize) -> IdempotencyLayer {
        self.with(|s| s.max_response_bytes = n)
    }

    /// The status of a key reused with a different request: 422 (default), 409 or 400.
    pub fn mismatch_status(self, status: StatusCode) -> IdempotencyLayer {
        self.with(|s| s.mismatch_status = status)
    }

    /// When the store cannot be reached: false (default) answers 503 with Retry-After;
    /// true runs the handler without protection (logged).
    pub fn fail_open(self, open: bool) -> IdempotencyLayer {
        self.with(|s| s.fail_open = open)
    }

    /// How long a claim may take (waiting included) before the store counts as unreachable.
    pub fn store_timeout(self, timeout: Duration) -> IdempotencyLayer {
        self.with(|s| s.store_timeout = timeout)
    }

    /// The Retry-After of a 503 when the store cannot be reached (default 1 s).
    pub fn unavailable_retry_after(self, after: Duration) -> IdempotencyLayer {
        self.with(|s| s.unavailable_retry_after = after)
    }

    /// Also stores and replays the response headers `names` (any case), beside the default
    /// list (`headers::DEFAULT_REPLAYED`). A replay goes to whoever repeats the key: add
    /// only headers that any such caller may see.
    ///
    /// # Panics
    /// On a name that is not a header name, or one of `headers::NEVER_REPLAYED`
    /// (`Set-Cookie`, credentials, hop-by-hop headers): a configuration error, found when
    /// the layer is built. `header_policy` takes a policy built without panicking.
    pub fn replay_headers<I, N>(self, names: I) -> IdempotencyLayer
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.with(|s| {
            let policy = (*s.headers).clone().replay(names);
            s.headers = Arc::new(policy.unwrap_or_else(|e| panic!("replay_headers: {e}")));
        })
    }

    /// Never stores or replays the response headers `names` (any case), not even those of
    /// the default list or of `replay_headers`: the handler's answer still carries them to
    /// the first caller.
    ///
    /// # Panics
    /// On a name that is not a header name.
    pub fn private_headers<I, N>(self, names: I) -> IdempotencyLayer
    where
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.with(|s| {
            let policy = (*s.headers).clone().private(names);
            s.headers = Arc::new(policy.unwrap_or_else(|e| panic!("private_headers: {e}")));
        })
    }

    /// The whole header policy at once (`ReplayHeaders::default().replay(..)?.private(..)?`,
    /// for names read from a configuration file).
    pub fn header_policy(self, policy: ReplayHeaders) -> IdempotencyLayer {
        self.with(|s| s.headers = Arc::new(policy))
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> IdempotencyService<S> {
        IdempotencyService::new(inner, self.settings.clone())
    }
}
