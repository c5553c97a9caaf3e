//! What the proxy does with a tool's calls: pass them on, or deduplicate them and how.
//!
//! The configuration decides. Where it says `auto` (the default), the tool's MCP
//! annotations do: `readOnlyHint: true` passes, anything else (no annotations, a write, a
//! tool the upstream did not list) is deduplicated. Annotations are the upstream server's
//! word and may be wrong, so a read-only hint on a tool with an effect is overridden by
//! naming the tool in the configuration.

use std::time::Duration;

use crate::config::{Config, Mode, Oversize, ReconcileRead, Strategy, ToolConfig, UnknownOutcome};

/// A result larger than this is not kept unless the configuration says otherwise.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;
/// How long a duplicate waits for a running first call by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Pass { why: Why },
    Dedupe { policy: Policy, why: Why },
}

/// What decided: shown in `tools/list` and the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Config,
    ReadOnlyHint,
    NoReadOnlyHint,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub strategy: Strategy,
    pub key_field: Option<String>,
    pub ttl: Option<Duration>,
    pub lease: Option<Duration>,
    pub wait: Duration,
    pub on_cache_hit: Option<protocol::OnCacheHit>,
    pub cache_failures: Option<bool>,
    pub on_mismatch: Option<protocol::OnMismatch>,
    pub max_result_bytes: usize,
    pub oversize: Oversize,
    pub on_unknown_outcome: Unknown,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Unknown {
    Rerun,
    Refuse,
    Reconcile(ReconcileRead),
}

/// The decision for tool `name`, whose read-only hint (if it listed one) is `read_only`.
pub fn decide(config: &Config, name: &str, read_only: Option<bool>) -> Decision {
    let own = config.tools.get(name);
    let merged = own.cloned().unwrap_or_default().or(&config.defaults);
    match merged.mode.unwrap_or(Mode::Auto) {
        Mode::Pass => Decision::Pass { why: Why::Config },
        Mode::Dedupe => Decision::Dedupe {
            policy: policy_of(&merged),
            why: Why::Config,
        },
        Mode::Auto if read_only == Some(true) => Decision::Pass {
            why: Why::ReadOnlyHint,
        },
        Mode::Auto => Decision::Dedupe {
            policy: policy_of(&merged),
            why: Why::NoReadOnlyHint,
        },
    }
}

fn policy_of(t: &ToolConfig) -> Policy {
    Policy {
        strategy: t.strategy.unwrap_or(Strategy::HashInput),
        key_field: t.key_field.clone(),
        ttl: ToolConfig::duration(&t.ttl),
        lease: ToolConfig::duration(&t.lease),
        wait: ToolConfig::duration(&t.wait).unwrap_or(DEFAULT_WAIT),
        on_cache_hit: t
            .on_cache_hit
            .as_deref()
            .and_then(protocol::OnCacheHit::parse),
        cache_failures: t.cache_failures,
        on_mismatch: t
            .on_mismatch
            .as_deref()
            .and_then(protocol::OnMismatch::parse),
        max_result_bytes: t.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES),
        oversize: t.oversize.unwrap_or(Oversize::Mark),
        on_unknown_outcome: match &t.on_unknown_outcome {
            None => Unknown::Rerun,
            Some(UnknownOutcome::Word(w)) if w == "refuse" => Unknown::Refuse,
            Some(UnknownOutcome::Word(_)) => Unknown::Rerun,
            Some(UnknownOutcome::Reconcile { reconcile }) => Unknown::Reconcile(reconcile.clone()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text).unwrap()
    }

    #[test]
    fn annotations_seed_the_config_wins() {
        let c = config("");
        assert!(matches!(
            decide(&c, "read_graph", Some(true)),
            Decision::Pass {
                why: Why::ReadOnlyHint
            }
        ));
        assert!(matches!(
            decide(&c, "create_entities", Some(false)),
            Decision::Dedupe {
                why: Why::NoReadOnlyHint,
                ..
            }
        ));
        assert!(matches!(
            decide(&c, "unlisted", None),
            Decision::Dedupe { .. }
        ));
        let c = config("[tools.read_graph]\nmode = \"dedupe\"\n[tools.echo]\nmode = \"pass\"\n");
        assert!(matches!(
            decide(&c, "read_graph", Some(true)),
            Decision::Dedupe {
                why: Why::Config,
                ..
            }
        ));
        assert!(matches!(
            decide(&c, "echo", Some(false)),
            Decision::Pass { why: Why::Config }
        ));
        let c = config("[defaults]\nmode = \"pass\"\n[tools.send]\nmode = \"auto\"\n");
        assert!(matches!(
            decide(&c, "other", Some(false)),
            Decision::Pass { why: Why::Config }
        ));
        assert!(matches!(
            decide(&c, "send", Some(false)),
            Decision::Dedupe {
                why: Why::NoReadOnlyHint,
                ..
            }
        ));
        assert!(matches!(
            decide(&c, "send", Some(true)),
            Decision::Pass {
                why: Why::ReadOnlyHint
            }
        ));
    }

    #[test]
    fn members_layer_over_defaults() {
        let c = config(
            "[defaults]\nttl = \"1h\"\nwait = \"2s\"\ncache_failures = true\n[tools.send]\nttl = \"5m\"\nstrategy = \"explicit\"\nkey_field = \"message_id\"\non_unknown_outcome = { reconcile = { tool = \"find\", arguments = { id = \"/message_id\" } } }\n",
        );
        let Decision::Dedupe { policy, .. } = decide(&c, "send", None) else {
            panic!()
        };
        assert_eq!(policy.ttl, Some(Duration::from_secs(300)));
        assert_eq!(policy.wait, Duration::from_secs(2));
        assert_eq!(policy.cache_failures, Some(true));
        assert_eq!(policy.strategy, Strategy::Explicit);
        assert!(matches!(policy.on_unknown_outcome, Unknown::Reconcile(ref r) if r.tool == "find"));
    }

    #[test]
    fn bad_members_are_refused_at_start() {
        for bad in [
            "[tools.x]\nttl = \"soon\"\n",
            "[tools.x]\nmode = \"maybe\"\n",
            "[tools.x]\non_cache_hit = \"sometimes\"\n",
            "[tools.x]\nstrategy = \"explicit\"\n",
            "[tools.x]\non_unknown_outcome = \"retry\"\n",
            "[tools.x]\nwat = 1\n",
            "[upstream]\ncommand = \"a\"\nurl = \"http://b\"\n",
        ] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }
}
