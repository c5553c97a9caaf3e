//! How a tool's calls are deduplicated: the key strategy and the settings of its records.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::types::{OnCacheHit, OnMismatch};

/// A function that names a call from its input (an order id, an issue title...).
pub type KeySupplier = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;

/// Where a call's key comes from.
#[derive(Clone)]
pub enum KeyStrategy {
    /// The canonical SHA-256 of the input (the same key SQL's HASH_INPUT computes).
    HashInput,
    /// A key supplier; a missing or blank key is an error.
    Explicit(KeySupplier),
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
        KeyStrategy::Explicit(Arc::new(f))
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

/// How a tool's (or a web action's) calls are deduplicated: the Rust form of the
/// framework's `@Idempotent(strategy, ttlSeconds, ...)`. The defaults: HashInput, and every
/// other setting unset: the scope's policy in the database decides, else the server's
/// defaults (a ttl of one hour, replay any remembered result, failures not cached). (Named for the annotation,
/// not "policy": a scope's policy is what `idem_set_policy` stores in the database.)
#[derive(Debug, Clone)]
pub struct Idempotent {
    pub strategy: KeyStrategy,
    /// None: the scope's policy in the database, else the server's default_ttl (one hour
    /// unless configured); a store without policies uses one hour. Unset fields are not
    /// sent, so a policy set with idem_set_policy governs them.
    pub ttl: Option<Duration>,
    /// None: the scope's policy, else return_cached.
    pub on_cache_hit: Option<OnCacheHit>,
    /// None: the scope's policy, else failures are not cached.
    pub cache_failures: Option<bool>,
    /// None: the store's default (reject), or the scope's policy in the database.
    pub on_mismatch: Option<OnMismatch>,
    /// None: the store's default lease (one minute, capped by the ttl).
    pub lease: Option<Duration>,
    /// Covers the store calls and the tool's work together.
    pub timeout: Option<Duration>,
    /// What of the input a repeat must match (see [`Fingerprint`]).
    pub fingerprint: Fingerprint,
    /// How long a duplicate that arrives while the call runs waits for its result (then
    /// replays it) instead of answering `InProgress`. Zero: it does not wait.
    pub wait: Duration,
}

impl Default for Idempotent {
    fn default() -> Idempotent {
        Idempotent {
            strategy: KeyStrategy::HashInput,
            ttl: None,
            on_cache_hit: None,
            cache_failures: None,
            on_mismatch: None,
            lease: None,
            timeout: None,
            fingerprint: Fingerprint::ByStrategy,
            wait: Duration::ZERO,
        }
    }
}
