//! The proxy's configuration file (TOML): where the records live, what is in front, what is
//! behind, and a policy per tool. docs/mcp.md is its reference; every member is checked
//! here, at start, so that a typo fails the start rather than a call.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::duration::parse_duration;
use crate::limits::Limits;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub database: Database,
    #[serde(default)]
    pub front: Front,
    #[serde(default)]
    pub upstream: Upstream,
    /// What every tool leaves unset.
    #[serde(default)]
    pub defaults: ToolConfig,
    /// Per tool, by its upstream name.
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    /// Bounds on what one principal or one crowd of requests may hold.
    #[serde(default)]
    pub limits: Limits,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Database {
    /// A libpq connection string or URL. Unset: `PGIDEM_MCP_DATABASE_URL`, then
    /// `DATABASE_URL`.
    pub url: Option<String>,
    /// Connections in the pool (default 8).
    pub pool_size: Option<usize>,
}

impl Database {
    pub fn pool_size(&self) -> usize {
        self.pool_size.unwrap_or(8)
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FrontTransport {
    /// The MCP client starts the proxy as its server.
    #[default]
    Stdio,
    /// Streamable HTTP.
    Http,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Front {
    #[serde(default)]
    pub transport: FrontTransport,
    /// HTTP: the address to listen on (default 127.0.0.1:8931).
    pub listen: Option<String>,
    /// HTTP: the endpoint's path (default /mcp).
    pub path: Option<String>,
    /// HTTP: the `Host` values accepted (default: loopback names only, against DNS
    /// rebinding).
    pub allowed_hosts: Option<Vec<String>>,
    /// The identity whose key space calls live in when nothing else names one: the only
    /// one on stdio; on HTTP, the one of a request no client entry or header names (unset:
    /// such requests are refused when `clients` or `principal_header` is set).
    pub principal: Option<String>,
    /// HTTP: a request header that names the principal, set by an authenticating gateway
    /// in front of the proxy (the OAuth subject, say). Trusted as is: only for a proxy no
    /// one reaches except through that gateway.
    pub principal_header: Option<String>,
    /// HTTP: bearer tokens the proxy accepts itself, each naming its principal.
    #[serde(default)]
    pub clients: Vec<Client>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Client {
    /// The bearer token (`Authorization: Bearer <token>`), or the variable that holds it.
    pub token: Option<String>,
    pub token_env: Option<String>,
    pub principal: String,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The server's name: the first part of every scope (default "upstream").
    pub name: Option<String>,
    /// A server started as a child process, spoken to over its stdio.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// A server reached over Streamable HTTP.
    pub url: Option<String>,
    /// Headers sent to it on every request (an `Authorization`, say).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// A tool's policy as written; what it leaves unset is `[defaults]`', then the proxy's.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// `pass` (forwarded as is), `dedupe`, or `auto` (the tool's annotations decide:
    /// `readOnlyHint` true passes, anything else is deduplicated).
    pub mode: Option<Mode>,
    /// `hash_input` (the default), `explicit` (`key_field` names the call), `uuid` (every
    /// call new: not deduplicated unless the client names a key).
    pub strategy: Option<Strategy>,
    /// For `explicit`: the argument whose value is the key (a name, or a JSON pointer).
    pub key_field: Option<String>,
    pub ttl: Option<String>,
    pub lease: Option<String>,
    /// How long a duplicate waits for a running first call before it is told to retry.
    pub wait: Option<String>,
    pub on_cache_hit: Option<String>,
    pub cache_failures: Option<bool>,
    /// `reject` (the default for a key the client names) or `ignore`.
    pub on_mismatch: Option<String>,
    /// The largest result kept, in bytes (serialized JSON).
    pub max_result_bytes: Option<usize>,
    /// What a larger result does: `mark` (a mark is kept: every retry is told the effect
    /// happened; the default) or `release` (the claim is released: a retry runs again).
    pub oversize: Option<Oversize>,
    /// A call taken over from an attempt that may have acted: `rerun`, `refuse`, or a
    /// table naming a read tool (`{ reconcile = { tool = ..., ... } }`).
    pub on_unknown_outcome: Option<UnknownOutcome>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Pass,
    Dedupe,
    Auto,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    HashInput,
    Explicit,
    Uuid,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Oversize {
    Mark,
    Release,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum UnknownOutcome {
    /// `rerun` or `refuse`.
    Word(String),
    Reconcile {
        reconcile: ReconcileRead,
    },
}

/// A read tool of the same server that tells whether an earlier attempt's effect happened.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRead {
    pub tool: String,
    /// Its arguments: each a JSON pointer into the call's arguments (`"/message_id"`), or
    /// `"$key"` for the call's key.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
    /// Where, in the read's structured result, a boolean says the effect was found
    /// (default `/found`).
    pub found: Option<String>,
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Config> {
        let config: Config = toml::from_str(text)?;
        config.check()?;
        Ok(config)
    }

    /// Everything a call would trip on later, refused now.
    pub fn check(&self) -> Result<()> {
        self.defaults.check("[defaults]")?;
        self.limits.check(self.database.pool_size())?;
        for (name, tool) in &self.tools {
            tool.check(&format!("[tools.{name}]"))?;
        }
        if self.upstream.command.is_some() && self.upstream.url.is_some() {
            bail!("[upstream] names both a command and a url: choose one");
        }
        for c in &self.front.clients {
            if c.token.is_none() == c.token_env.is_none() {
                bail!(
                    "[[front.clients]] for principal {:?} needs exactly one of token and token_env",
                    c.principal
                );
            }
        }
        Ok(())
    }
}

impl ToolConfig {
    fn check(&self, at: &str) -> Result<()> {
        for (what, value) in [
            ("ttl", &self.ttl),
            ("lease", &self.lease),
            ("wait", &self.wait),
        ] {
            if let Some(v) = value {
                parse_duration(v).with_context(|| format!("{at} {what}"))?;
            }
        }
        if let Some(w) = &self.on_cache_hit {
            if protocol::OnCacheHit::parse(w).is_none() {
                bail!(
                    "{at} on_cache_hit = {w:?}: expected one of {}",
                    protocol::OnCacheHit::listed()
                );
            }
        }
        if let Some(w) = &self.on_mismatch {
            if protocol::OnMismatch::parse(w).is_none() {
                bail!(
                    "{at} on_mismatch = {w:?}: expected one of {}",
                    protocol::OnMismatch::listed()
                );
            }
        }
        if self.strategy == Some(Strategy::Explicit) && self.key_field.is_none() {
            bail!("{at} strategy = \"explicit\" needs key_field, the argument that names the call");
        }
        match &self.on_unknown_outcome {
            Some(UnknownOutcome::Word(w)) if w != "rerun" && w != "refuse" => bail!(
                "{at} on_unknown_outcome = {w:?}: expected \"rerun\", \"refuse\" or {{ reconcile = {{ tool = \"...\" }} }}"
            ),
            Some(UnknownOutcome::Reconcile { reconcile }) => {
                for (arg, source) in &reconcile.arguments {
                    if source != "$key" && !source.starts_with('/') {
                        bail!("{at} reconcile argument {arg} = {source:?}: expected a JSON pointer (\"/{source}\") or \"$key\"");
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// This tool's members over `fallback`'s, member by member.
    pub fn or(&self, fallback: &ToolConfig) -> ToolConfig {
        ToolConfig {
            mode: self.mode.or(fallback.mode),
            strategy: self.strategy.or(fallback.strategy),
            key_field: self
                .key_field
                .clone()
                .or_else(|| fallback.key_field.clone()),
            ttl: self.ttl.clone().or_else(|| fallback.ttl.clone()),
            lease: self.lease.clone().or_else(|| fallback.lease.clone()),
            wait: self.wait.clone().or_else(|| fallback.wait.clone()),
            on_cache_hit: self
                .on_cache_hit
                .clone()
                .or_else(|| fallback.on_cache_hit.clone()),
            cache_failures: self.cache_failures.or(fallback.cache_failures),
            on_mismatch: self
                .on_mismatch
                .clone()
                .or_else(|| fallback.on_mismatch.clone()),
            max_result_bytes: self.max_result_bytes.or(fallback.max_result_bytes),
            oversize: self.oversize.or(fallback.oversize),
            on_unknown_outcome: self
                .on_unknown_outcome
                .clone()
                .or_else(|| fallback.on_unknown_outcome.clone()),
        }
    }

    pub fn duration(value: &Option<String>) -> Option<Duration> {
        value.as_deref().and_then(|v| parse_duration(v).ok())
    }
}
