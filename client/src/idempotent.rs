//! How a tool's calls are deduplicated: the key strategy and the settings of its records.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::tool_error::ToolError;
use crate::types::{OnCacheHit, OnMismatch};

/// A function that names a call from its input (an order id, an issue title...).
pub type KeySupplier = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;

/// Where a call's key comes from.
#[derive(Clone)]
pub enum KeyStrategy {
    /// The canonical SHA-256 of the input (the same key SQL's HASH_INPUT computes).
    HashInput,
    /// A key supplier; a missing or blank key is an error. `None`: the supplier of the
    /// tool's toolkit (the Java framework's `IdempotencyKeySupplier` on the class,
    /// [`Toolkit::key_supplier`](crate::Toolkit::key_supplier)); a tool that has neither is
    /// refused by `register`.
    Explicit(Option<KeySupplier>),
    /// A fresh key per call, sent upstream as `Idempotency-Key`; nothing deduplicated here.
    Uuid,
    /// No key: every call runs.
    None,
}

impl fmt::Debug for KeyStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyStrategy::HashInput => "HashInput",
            KeyStrategy::Explicit(_) => "Explicit",
            KeyStrategy::Uuid => "Uuid",
            KeyStrategy::None => "None",
        })
    }
}

impl KeyStrategy {
    /// Whether calls under this strategy are deduplicated by the store.
    pub fn deduplicates(&self) -> bool {
        matches!(self, KeyStrategy::HashInput | KeyStrategy::Explicit(_))
    }

    /// An explicit strategy from a closure.
    pub fn explicit(f: impl Fn(&Value) -> Option<String> + Send + Sync + 'static) -> KeyStrategy {
        KeyStrategy::Explicit(Some(Arc::new(f)))
    }
}

/// A function that picks what of a call's input is compared when its key repeats.
pub type FingerprintFn = Arc<dyn Fn(&Value) -> Value + Send + Sync>;

/// What of a call's input must be the same when its key repeats; a repeat that differs is
/// answered by `on_mismatch` (reject, by default). Identity is the key strategy's; this is
/// a separate choice.
#[derive(Clone, Default)]
pub enum Fingerprint {
    /// The strategy's rule. HashInput: the whole input (its hash is the key). Explicit: nothing,
    /// since the key alone names the call ("same title, same issue: body edits do not create
    /// a second one"): a repeat with other fields replays.
    #[default]
    ByStrategy,
    /// The whole input.
    WholeInput,
    /// The values at these JSON pointers (RFC 6901, e.g. `/body`); a missing one counts as
    /// null.
    Fields(Vec<String>),
    /// What a function of the input returns.
    Of(FingerprintFn),
    /// Nothing is compared.
    Nothing,
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fingerprint::ByStrategy => f.write_str("ByStrategy"),
            Fingerprint::WholeInput => f.write_str("WholeInput"),
            Fingerprint::Fields(p) => f.debug_tuple("Fields").field(p).finish(),
            Fingerprint::Of(_) => f.write_str("Of"),
            Fingerprint::Nothing => f.write_str("Nothing"),
        }
    }
}

impl Fingerprint {
    /// A fingerprint computed by a function of the input.
    pub fn of(f: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Fingerprint {
        Fingerprint::Of(Arc::new(f))
    }

    /// A field that is not a JSON pointer (`""` or starting with `/`) would silently compare
    /// nothing: refused when the tool is registered.
    pub fn check(&self) -> crate::error::Result<()> {
        if let Fingerprint::Fields(pointers) = self {
            if let Some(bad) = pointers
                .iter()
                .find(|p| !p.is_empty() && !p.starts_with('/'))
            {
                return Err(crate::error::Error::invalid(format!(
                    "fingerprint field {bad:?} is not a JSON pointer"
                ))
                .with_detail(
                    "Fields are JSON pointers (RFC 6901): \"\" or a path such as \"/body\".",
                )
                .with_hint(format!("Write \"/{bad}\" for the top-level field {bad:?}.")));
            }
        }
        Ok(())
    }

    /// The request a store compares (`BeginOptions::request`), if any.
    pub fn request(&self, strategy: &KeyStrategy, input: &Value) -> Option<Value> {
        match self {
            Fingerprint::ByStrategy => match strategy {
                KeyStrategy::Explicit(_) => None,
                _ => Some(input.clone()),
            },
            Fingerprint::WholeInput => Some(input.clone()),
            Fingerprint::Fields(pointers) => Some(Value::Object(
                pointers
                    .iter()
                    .map(|p| (p.clone(), input.pointer(p).cloned().unwrap_or(Value::Null)))
                    .collect(),
            )),
            Fingerprint::Of(f) => Some(f(input)),
            Fingerprint::Nothing => None,
        }
    }
}

/// What a reconcile read is given: the call an earlier attempt may have performed.
#[derive(Debug, Clone)]
pub struct Reconcile {
    pub input: Value,
    /// The call's key.
    pub key: String,
    /// The record's upstream key, the same the earlier attempt had (and may have sent
    /// upstream as `Idempotency-Key`): look the effect up by it where the upstream allows.
    pub upstream_key: uuid::Uuid,
    /// This attempt's number (the earlier attempt's plus one).
    pub attempt: i32,
}

/// What a reconcile read found out about the earlier attempt's effect.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    /// The effect happened, and this is its result: it is recorded (and the call answered
    /// as a replay) without running the tool.
    Found(Value),
    /// The effect did not happen: the tool runs.
    NotFound,
    /// It cannot tell: the call is refused as `OutcomeUnknown`, as under `Refuse`.
    Unknown,
}

/// A reconcile read: an async function of the call that looks its effect up.
pub type ReconcileFn = Arc<
    dyn Fn(Reconcile) -> Pin<Box<dyn Future<Output = Result<Reconciled, ToolError>> + Send>>
        + Send
        + Sync,
>;

/// What a takeover does when the attempt it replaces may have performed the effect (its
/// lease lapsed before it recorded anything: a crash, a pause, a store that stayed out of
/// reach). The claim says `recovered`.
#[derive(Clone, Default)]
pub enum OnUnknownOutcome {
    /// Run the tool again. Right when the upstream deduplicates on the key the tool sends
    /// it (the call's key or the record's `upstream_key`, the same across takeovers), or
    /// when the effect is harmless to repeat.
    #[default]
    Rerun,
    /// Refuse: the call is answered `OutcomeUnknown`, and so is every retry, until an
    /// operator forgets the record (`idem_forget`, `IdempotencyStore::forget`) after
    /// finding out what happened.
    Refuse,
    /// Ask a read function (`Idempotent::reconcile`): record what it finds, run the tool if
    /// it finds nothing, refuse if it cannot tell.
    Reconcile(ReconcileFn),
}

impl fmt::Debug for OnUnknownOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnUnknownOutcome::Rerun => "Rerun",
            OnUnknownOutcome::Refuse => "Refuse",
            OnUnknownOutcome::Reconcile(_) => "Reconcile",
        })
    }
}

/// How a tool's (or a web action's) calls are deduplicated: the Rust form of the
/// framework's `@Idempotent(strategy, ttlSeconds, ...)`. Every field is unset by default
/// and set with the builder methods of the same name:
///
/// ```
/// # use pg_idempotency_client::{Idempotent, OnCacheHit};
/// # use std::time::Duration;
/// let place_order = Idempotent::new()
///     .hash_input()
///     .cache_failures(true)
///     .on_cache_hit(OnCacheHit::FailFast)
///     .ttl(Duration::from_secs(24 * 3600));
/// ```
///
/// Settings on a tool replace its toolkit's ([`Toolkit`](crate::Toolkit)) whole, and a
/// toolkit's replace the dispatcher's defaults whole: the Java framework's "the method wins".
/// A level inherits the fields it leaves unset from the level below only when it says so
/// ([`Idempotent::inherit_unset`]). A store setting unset in the settings that govern is
/// not sent, so the scope's policy in the database (`idem_set_policy`) decides, else the
/// server's settings (a ttl of one hour, replay any remembered result, failures not
/// cached, reject a mismatch). The strategy, fingerprint and wait unset are HashInput,
/// [`Fingerprint::ByStrategy`] and no wait. (Named for the annotation, not "policy": a
/// scope's policy is what `idem_set_policy` stores.)
#[derive(Debug, Clone, Default)]
pub struct Idempotent {
    /// None: HashInput (the Java framework's default).
    pub strategy: Option<KeyStrategy>,
    /// None: the scope's policy in the database, else the server's default_ttl (one hour
    /// unless configured); a store without policies uses one hour.
    pub ttl: Option<Duration>,
    /// None: the scope's policy, else return_cached.
    pub on_cache_hit: Option<OnCacheHit>,
    /// None: the scope's policy, else failures are not cached.
    pub cache_failures: Option<bool>,
    /// None: the scope's policy, else reject.
    pub on_mismatch: Option<OnMismatch>,
    /// None: the scope's policy, else the store's default lease (one minute, capped by the
    /// ttl).
    pub lease: Option<Duration>,
    /// Covers the store calls and the tool's work together. None: no limit.
    pub timeout: Option<Duration>,
    /// What of the input a repeat must match (see [`Fingerprint`]). None: ByStrategy.
    pub fingerprint: Option<Fingerprint>,
    /// How long a duplicate that arrives while the call runs waits for its result (then
    /// replays it) instead of answering `InProgress`. None: it does not wait.
    pub wait: Option<Duration>,
    /// What a takeover of a call whose earlier attempt may have acted does. None: Rerun.
    pub on_unknown_outcome: Option<OnUnknownOutcome>,
    /// How long past its lease's end (or its mark's completion) a call whose outcome is
    /// unknown stays unresolved: a crashed claim is taken over as recovered, a mark is
    /// replayed, until an operator resolves it or this passes (docs/client.md, "When a key
    /// can be used again"). None: the scope's policy, else the server's
    /// pg_idempotency.unresolved_ttl (7 days).
    pub unresolved_ttl: Option<Duration>,
    /// Whether the fields these settings leave unset come from the level below (a tool's
    /// from its toolkit's, a toolkit's from the dispatcher's defaults), field by field.
    /// False (the default): these settings replace the lower level's whole.
    pub inherit: bool,
}

impl Idempotent {
    /// Every setting unset.
    pub fn new() -> Idempotent {
        Idempotent::default()
    }

    pub fn strategy(mut self, strategy: KeyStrategy) -> Idempotent {
        self.strategy = Some(strategy);
        self
    }
    /// `KeyStrategy::HashInput`.
    pub fn hash_input(self) -> Idempotent {
        self.strategy(KeyStrategy::HashInput)
    }
    /// `KeyStrategy::Explicit` with the toolkit's key supplier (the Java framework's
    /// `strategy = EXPLICIT` on a class that implements `IdempotencyKeySupplier`).
    pub fn explicit(self) -> Idempotent {
        self.strategy(KeyStrategy::Explicit(None))
    }
    /// `KeyStrategy::Explicit` with this tool's own key supplier.
    pub fn key_supplier(
        self,
        f: impl Fn(&Value) -> Option<String> + Send + Sync + 'static,
    ) -> Idempotent {
        self.strategy(KeyStrategy::explicit(f))
    }
    pub fn ttl(mut self, ttl: Duration) -> Idempotent {
        self.ttl = Some(ttl);
        self
    }
    pub fn on_cache_hit(mut self, on_cache_hit: OnCacheHit) -> Idempotent {
        self.on_cache_hit = Some(on_cache_hit);
        self
    }
    pub fn cache_failures(mut self, cache_failures: bool) -> Idempotent {
        self.cache_failures = Some(cache_failures);
        self
    }
    pub fn on_mismatch(mut self, on_mismatch: OnMismatch) -> Idempotent {
        self.on_mismatch = Some(on_mismatch);
        self
    }
    pub fn lease(mut self, lease: Duration) -> Idempotent {
        self.lease = Some(lease);
        self
    }
    pub fn unresolved_ttl(mut self, unresolved_ttl: Duration) -> Idempotent {
        self.unresolved_ttl = Some(unresolved_ttl);
        self
    }
    pub fn timeout(mut self, timeout: Duration) -> Idempotent {
        self.timeout = Some(timeout);
        self
    }
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Idempotent {
        self.fingerprint = Some(fingerprint);
        self
    }
    pub fn wait(mut self, wait: Duration) -> Idempotent {
        self.wait = Some(wait);
        self
    }
    pub fn on_unknown_outcome(mut self, choice: OnUnknownOutcome) -> Idempotent {
        self.on_unknown_outcome = Some(choice);
        self
    }
    /// `OnUnknownOutcome::Reconcile` with this read: given the call (its input and its
    /// upstream key), it finds out whether the earlier attempt's effect happened.
    pub fn reconcile<F, Fut>(self, read: F) -> Idempotent
    where
        F: Fn(Reconcile) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reconciled, ToolError>> + Send + 'static,
    {
        self.on_unknown_outcome(OnUnknownOutcome::Reconcile(Arc::new(move |call| {
            Box::pin(read(call))
        })))
    }

    /// Opts in to inheriting field by field: each field these settings leave unset is the
    /// level below's (a tool's toolkit's, then the dispatcher's defaults), instead of these
    /// settings replacing that level's whole. `Idempotent::new().ttl(day).inherit_unset()`
    /// on a tool keeps its toolkit's `cache_failures`, `on_cache_hit`, lease...
    pub fn inherit_unset(mut self) -> Idempotent {
        self.inherit = true;
        self
    }

    /// These settings over `fallback`'s, field by field: each field this leaves unset is
    /// `fallback`'s (as `Option::or`). What a call's own settings do over its tool's;
    /// between a tool and its toolkit, only with [`inherit_unset`](Self::inherit_unset).
    pub fn or(&self, fallback: &Idempotent) -> Idempotent {
        Idempotent {
            strategy: self.strategy.clone().or_else(|| fallback.strategy.clone()),
            ttl: self.ttl.or(fallback.ttl),
            on_cache_hit: self.on_cache_hit.or(fallback.on_cache_hit),
            cache_failures: self.cache_failures.or(fallback.cache_failures),
            on_mismatch: self.on_mismatch.or(fallback.on_mismatch),
            lease: self.lease.or(fallback.lease),
            timeout: self.timeout.or(fallback.timeout),
            fingerprint: self
                .fingerprint
                .clone()
                .or_else(|| fallback.fingerprint.clone()),
            wait: self.wait.or(fallback.wait),
            on_unknown_outcome: self
                .on_unknown_outcome
                .clone()
                .or_else(|| fallback.on_unknown_outcome.clone()),
            unresolved_ttl: self.unresolved_ttl.or(fallback.unresolved_ttl),
            inherit: self.inherit && fallback.inherit,
        }
    }

    /// The key strategy in force: HashInput when unset.
    pub fn key_strategy(&self) -> KeyStrategy {
        self.strategy.clone().unwrap_or(KeyStrategy::HashInput)
    }

    /// The fingerprint rule in force: ByStrategy when unset.
    pub fn fingerprint_rule(&self) -> Fingerprint {
        self.fingerprint.clone().unwrap_or_default()
    }
}
