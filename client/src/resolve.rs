//! From a tool's settings to its call: the settings layered and checked, the call's key,
//! what `begin` is asked, and what a takeover does. Shared by the [`Dispatcher`] and
//! [`ExactlyOnce`], so that a tool's calls get the same key and fingerprint whichever runs
//! them.
//!
//! [`Dispatcher`]: crate::Dispatcher
//! [`ExactlyOnce`]: crate::ExactlyOnce

use std::time::Duration;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::holder::Plan;
use crate::idempotent::{Idempotent, KeyStrategy, KeySupplier, OnUnknownOutcome};
use crate::types::{BeginOptions, Claim};

/// A tool's settings at registration, and whether they protect it (without, it is not
/// deduplicated). The nearest level with settings governs whole (its own, else its
/// toolkit's, else the defaults): the Java framework's "the method wins". A level that opts in
/// (`Idempotent::inherit_unset`) takes the fields it leaves unset from the next level with
/// settings. A read-only tool (no side effect) is protected by its own settings only:
/// the Java framework says to skip deduplication for reads, so its toolkit's and the defaults
/// never make it deduplicated (they still fill its unset fields where it inherits).
pub(crate) fn layer(
    own: Option<&Idempotent>,
    kit: Option<&Idempotent>,
    defaults: Option<&Idempotent>,
    read_only: bool,
) -> (Idempotent, bool) {
    if read_only && own.is_none() {
        return (Idempotent::default(), false);
    }
    let levels: Vec<&Idempotent> = [own, kit, defaults].into_iter().flatten().collect();
    let Some((first, below)) = levels.split_first() else {
        return (Idempotent::default(), false);
    };
    let mut idem = (*first).clone();
    let mut inherits = first.inherit;
    for level in below {
        if !inherits {
            break;
        }
        idem = idem.or(level);
        inherits = level.inherit;
    }
    idem.inherit = false;
    (idem, true)
}

/// The settings a call of tool `name` runs with: the call's own (if any) over the tool's
/// layered ones, an Explicit strategy without a supplier given its toolkit's, no strategy at
/// all for a tool that no level gave settings (the Java framework's tool without `@Idempotent`),
/// and refused if a tool that requires idempotency would not be deduplicated.
pub(crate) fn settle(
    name: &str,
    requires_idempotency: bool,
    layered: &Idempotent,
    protected: bool,
    key_supplier: Option<&KeySupplier>,
    call: Option<&Idempotent>,
) -> Result<Idempotent> {
    let mut idem = match call {
        Some(call) => call.or(layered),
        None => layered.clone(),
    };
    if !protected && idem.strategy.is_none() {
        idem.strategy = Some(KeyStrategy::None);
    }
    if let Some(KeyStrategy::Explicit(None)) = idem.strategy {
        let Some(supplier) = key_supplier else {
            return Err(Error::invalid(format!(
                "tool {name} has an Explicit key strategy but no key supplier"
            ))
            .with_hint("Give the tool one (Idempotent::key_supplier) or register it in a Toolkit with Toolkit::key_supplier."));
        };
        idem.strategy = Some(KeyStrategy::Explicit(Some(supplier.clone())));
    }
    idem.fingerprint_rule().check()?;
    if requires_idempotency {
        let strategy = idem.key_strategy();
        if !strategy.deduplicates() {
            return Err(Error::invalid(format!("tool {name} requires idempotency but its key strategy is {strategy:?}"))
                .with_detail(if protected { "Its settings name a strategy that deduplicates nothing." } else { "It has no settings (Idempotent) of its own, from its toolkit, or from the dispatcher's defaults, so its calls would not be deduplicated." })
                .with_hint("Give it settings with KeyStrategy::HashInput or KeyStrategy::Explicit (ToolSpec::idempotent(Idempotent::new()) is HashInput), or drop the Required hint if repeats are harmless."));
        }
        if idem.ttl.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid(format!(
                "tool {name} requires idempotency but its ttl is zero"
            ))
            .with_hint("Give it a positive ttl, long enough for every retry of a call."));
        }
    }
    Ok(idem)
}

/// The key of a call under a strategy that deduplicates; None under `Uuid` and `None`,
/// whose calls are not remembered. A settled Explicit strategy has its supplier.
pub(crate) fn call_key(
    name: &str,
    strategy: &KeyStrategy,
    input: &Value,
) -> Result<Option<String>> {
    match strategy {
        KeyStrategy::HashInput => Ok(Some(pg_idempotency_canon::key_of(
            &pg_idempotency_canon::hash_value(input)?,
        ))),
        KeyStrategy::Explicit(supplier) => match supplier.as_ref().and_then(|f| f(input)) {
            Some(k) if !k.trim().is_empty() => Ok(Some(k)),
            _ => Err(
                Error::invalid(format!("tool {name} got a blank key from its key supplier"))
                    .with_hint("An Explicit key strategy must name every call."),
            ),
        },
        KeyStrategy::Uuid | KeyStrategy::None => Ok(None),
    }
}

/// What `begin` is asked for a call: its fingerprint and the store settings it sets (what
/// it leaves unset is the scope's policy's). The claim token is the caller's to add.
pub(crate) fn begin_options(
    idem: &Idempotent,
    strategy: &KeyStrategy,
    input: &Value,
) -> BeginOptions {
    BeginOptions {
        request: idem.fingerprint_rule().request(strategy, input),
        ttl: idem.ttl,
        lease: idem.lease,
        on_cache_hit: idem.on_cache_hit,
        on_mismatch: idem.on_mismatch,
        wait: idem.wait.unwrap_or(Duration::ZERO),
        claim_token: None,
        // None: the scope's policy, else pg_idempotency.unresolved_ttl (7 days).
        unresolved_ttl: idem.unresolved_ttl,
    }
}

/// What a claim is used for: the tool runs, unless the claim took the call over from an
/// attempt that may have acted (`recovered`), where the tool's choice decides.
pub(crate) fn plan(idem: &Idempotent, claim: &Claim) -> Plan {
    if !claim.recovered {
        return Plan::Run;
    }
    match idem.on_unknown_outcome.clone().unwrap_or_default() {
        OnUnknownOutcome::Rerun => Plan::Run,
        OnUnknownOutcome::Refuse => Plan::Refuse(format!(
            "attempt {} took the call over from one whose lease lapsed before it recorded an outcome, and the tool refuses to run again",
            claim.attempt
        )),
        OnUnknownOutcome::Reconcile(read) => Plan::Reconcile(read),
    }
}
