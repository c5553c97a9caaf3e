//! What the proxy does with a tool's calls: pass them on, or deduplicate them and how.
//!
//! The configuration decides. Where it says `auto` (the default), the tool's MCP
//! annotations do:
//!
//! - `readOnlyHint: true` passes: a read must see the present, not replay the past.
//! - `idempotentHint: true` passes: the server says a repeat has no further effect, so a
//!   retry is harmless, and a replay could undo a sequence (set A, set B, set A again
//!   within the ttl would leave B).
//! - no word on effects (no annotations, or none of the three hints: what most servers
//!   send) passes: the proxy cannot tell a read from a write, and a deduplicated read is
//!   answered with a result as old as the ttl. Writes of such a server are named in the
//!   configuration (`mode = "dedupe"`, or `[defaults] mode = "dedupe"`).
//! - any other annotated tool (`readOnlyHint: false`, or a `destructiveHint` or
//!   `idempotentHint: false`, which describe a write's effect) is deduplicated.
//!
//! Annotations are the upstream server's word and may be wrong, so a read-only hint on a
//! tool with an effect is overridden by naming the tool in the configuration.
//!
//! A takeover of a call whose earlier attempt may have acted (`on_unknown_outcome`)
//! refuses by default: the record is kept unresolved for an operator. It reruns by default
//! only for a tool annotated `idempotentHint: true`; the configuration says `rerun` for a
//! server that deduplicates on the upstream key the proxy sends it.

use std::time::Duration;

use rmcp::model::ToolAnnotations;

use crate::config::{Config, Mode, Oversize, ReconcileRead, Strategy, ToolConfig, UnknownOutcome};

/// A result larger than this is not kept unless the configuration says otherwise.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1 << 20;
/// How long a duplicate waits for a running first call by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// What the upstream server said of a tool's effects in its annotations (None: not said).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
}

impl Hints {
    pub fn of(annotations: Option<&ToolAnnotations>) -> Hints {
        annotations.map_or_else(Hints::default, |a| Hints {
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
            idempotent: a.idempotent_hint,
        })
    }

    /// Whether the server said nothing of the tool's effects.
    pub fn silent(&self) -> bool {
        self.read_only.is_none() && self.destructive.is_none() && self.idempotent.is_none()
    }
}

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
    IdempotentHint,
    /// Annotated, and neither read-only nor idempotent: a write whose repeat acts again.
    AnnotatedEffect,
    /// No `readOnlyHint`, `destructiveHint` nor `idempotentHint`.
    NoAnnotations,
}

/// What decided a deduplicated tool's `on_unknown_outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownBy {
    Config,
    IdempotentHint,
    /// Not configured, not annotated idempotent: refuse.
    Default,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub strategy: Strategy,
    pub key_field: Option<String>,
    pub ttl: Option<Duration>,
    pub lease: Option<Duration>,
    pub wait: Duration,
    pub on_cache_hit: Option<pg_idempotency_protocol::OnCacheHit>,
    pub cache_failures: Option<bool>,
    pub on_mismatch: Option<pg_idempotency_protocol::OnMismatch>,
    pub max_result_bytes: usize,
    pub oversize: Oversize,
    pub on_unknown_outcome: Unknown,
    pub on_unknown_outcome_by: UnknownBy,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Unknown {
    Rerun,
    Refuse,
    Reconcile(ReconcileRead),
}

/// The decision for tool `name`, whose annotations (if it listed any) say `hints`.
pub fn decide(config: &Config, name: &str, hints: Hints) -> Decision {
    let own = config.tools.get(name);
    let merged = own.cloned().unwrap_or_default().or(&config.defaults);
    let dedupe = |why| Decision::Dedupe {
        policy: policy_of(&merged, hints),
        why,
    };
    match merged.mode.unwrap_or(Mode::Auto) {
        Mode::Pass => Decision::Pass { why: Why::Config },
        Mode::Dedupe => dedupe(Why::Config),
        Mode::Auto if hints.read_only == Some(true) => Decision::Pass {
            why: Why::ReadOnlyHint,
        },
        Mode::Auto if hints.silent() => Decision::Pass {
            why: Why::NoAnnotations,
        },
        Mode::Auto if hints.idempotent == Some(true) => Decision::Pass {
            why: Why::IdempotentHint,
        },
        Mode::Auto => dedupe(Why::AnnotatedEffect),
    }
}

fn policy_of(t: &ToolConfig, hints: Hints) -> Policy {
    let (on_unknown_outcome, on_unknown_outcome_by) = match &t.on_unknown_outcome {
        None if hints.idempotent == Some(true) => (Unknown::Rerun, UnknownBy::IdempotentHint),
        None => (Unknown::Refuse, UnknownBy::Default),
        Some(UnknownOutcome::Word(w)) if w == "refuse" => (Unknown::Refuse, UnknownBy::Config),
        Some(UnknownOutcome::Word(_)) => (Unknown::Rerun, UnknownBy::Config),
        Some(UnknownOutcome::Reconcile { reconcile }) => {
            (Unknown::Reconcile(reconcile.clone()), UnknownBy::Config)
        }
    };
    Policy {
        strategy: t.strategy.unwrap_or(Strategy::HashInput),
        key_field: t.key_field.clone(),
        ttl: ToolConfig::duration(&t.ttl),
        lease: ToolConfig::duration(&t.lease),
        wait: ToolConfig::duration(&t.wait).unwrap_or(DEFAULT_WAIT),
        on_cache_hit: t
            .on_cache_hit
            .as_deref()
            .and_then(pg_idempotency_protocol::OnCacheHit::parse),
        cache_failures: t.cache_failures,
        on_mismatch: t
            .on_mismatch
            .as_deref()
            .and_then(pg_idempotency_protocol::OnMismatch::parse),
        max_result_bytes: t.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES),
        oversize: t.oversize.unwrap_or(Oversize::Mark),
        on_unknown_outcome,
        on_unknown_outcome_by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text).unwrap()
    }

    /// A tool annotated `readOnlyHint: b` and nothing else.
    fn read_only(b: bool) -> Hints {
        Hints {
            read_only: Some(b),
            ..Hints::default()
        }
    }

    /// A write as most annotating servers describe it (send_email, create_entities).
    fn write() -> Hints {
        Hints {
            read_only: Some(false),
            destructive: Some(false),
            idempotent: Some(false),
        }
    }

    #[test]
    fn annotations_seed_the_config_wins() {
        let c = config("");
        assert!(matches!(
            decide(&c, "read_graph", read_only(true)),
            Decision::Pass {
                why: Why::ReadOnlyHint
            }
        ));
        assert!(matches!(
            decide(&c, "create_entities", read_only(false)),
            Decision::Dedupe {
                why: Why::AnnotatedEffect,
                ..
            }
        ));
        assert!(matches!(
            decide(&c, "create_entities", write()),
            Decision::Dedupe {
                why: Why::AnnotatedEffect,
                ..
            }
        ));
        let c = config("[tools.read_graph]\nmode = \"dedupe\"\n[tools.echo]\nmode = \"pass\"\n");
        assert!(matches!(
            decide(&c, "read_graph", read_only(true)),
            Decision::Dedupe {
                why: Why::Config,
                ..
            }
        ));
        assert!(matches!(
            decide(&c, "echo", read_only(false)),
            Decision::Pass { why: Why::Config }
        ));
        let c = config("[defaults]\nmode = \"pass\"\n[tools.send]\nmode = \"auto\"\n");
        assert!(matches!(
            decide(&c, "other", read_only(false)),
            Decision::Pass { why: Why::Config }
        ));
        assert!(matches!(
            decide(&c, "send", read_only(false)),
            Decision::Dedupe {
                why: Why::AnnotatedEffect,
                ..
            }
        ));
        assert!(matches!(
            decide(&c, "send", read_only(true)),
            Decision::Pass {
                why: Why::ReadOnlyHint
            }
        ));
    }

    /// A tool the server says nothing about passes (a read is never replayed stale); one it
    /// calls idempotent passes too; `[defaults] mode = "dedupe"` deduplicates them all.
    #[test]
    fn silence_and_idempotence_pass_unless_configured() {
        let c = config("");
        for silent in [
            Hints::default(),
            Hints::of(Some(&ToolAnnotations::default())),
        ] {
            assert!(matches!(
                decide(&c, "count", silent),
                Decision::Pass {
                    why: Why::NoAnnotations
                }
            ));
        }
        let idempotent = Hints {
            read_only: Some(false),
            destructive: Some(true),
            idempotent: Some(true),
        };
        assert!(matches!(
            decide(&c, "write_file", idempotent),
            Decision::Pass {
                why: Why::IdempotentHint
            }
        ));
        // destructiveHint alone describes a write's effect (idempotent by default false).
        let destructive = Hints {
            destructive: Some(true),
            ..Hints::default()
        };
        assert!(matches!(
            decide(&c, "delete", destructive),
            Decision::Dedupe {
                why: Why::AnnotatedEffect,
                ..
            }
        ));
        let c = config("[defaults]\nmode = \"dedupe\"\n");
        assert!(matches!(
            decide(&c, "send", Hints::default()),
            Decision::Dedupe {
                why: Why::Config,
                ..
            }
        ));
    }

    /// A takeover refuses unless the configuration or `idempotentHint: true` says rerun.
    #[test]
    fn unknown_outcome_refuses_unless_said_otherwise() {
        let unknown = |c: &Config, name: &str, hints: Hints| match decide(c, name, hints) {
            Decision::Dedupe { policy, .. } => {
                (policy.on_unknown_outcome, policy.on_unknown_outcome_by)
            }
            other => panic!("{other:?}"),
        };
        let c = config("[tools.idem]\nmode = \"dedupe\"\n");
        assert_eq!(
            unknown(&c, "send", write()),
            (Unknown::Refuse, UnknownBy::Default)
        );
        let idempotent = Hints {
            idempotent: Some(true),
            ..write()
        };
        assert_eq!(
            unknown(&c, "idem", idempotent),
            (Unknown::Rerun, UnknownBy::IdempotentHint)
        );
        let c = config(
            "[defaults]\non_unknown_outcome = \"rerun\"\n[tools.pay]\non_unknown_outcome = \"refuse\"\n",
        );
        assert_eq!(
            unknown(&c, "send", write()),
            (Unknown::Rerun, UnknownBy::Config)
        );
        assert_eq!(
            unknown(&c, "pay", write()),
            (Unknown::Refuse, UnknownBy::Config)
        );
    }

    #[test]
    fn members_layer_over_defaults() {
        let c = config(
            "[defaults]\nttl = \"1h\"\nwait = \"2s\"\ncache_failures = true\n[tools.send]\nttl = \"5m\"\nstrategy = \"explicit\"\nkey_field = \"message_id\"\non_unknown_outcome = { reconcile = { tool = \"find\", arguments = { id = \"/message_id\" } } }\n",
        );
        let Decision::Dedupe { policy, .. } = decide(&c, "send", write()) else {
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
