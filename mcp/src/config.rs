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
    /// Bounds on what callers can make the proxy hold (`[limits]`).
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
    /// The schema pg_idempotency's SQL API is installed in (default `public`); every call
    /// names it, whatever the connection's search_path. Checked at start.
    pub schema: Option<String>,
    /// How the store sends its statements: `prepared` (the default: named statements
    /// cached per connection) or `unnamed` (behind a pooler in transaction mode: PgBouncer,
    /// Supavisor, Neon's pooler). Unset: `PGIDEM_MCP_STATEMENTS`, then `prepared`.
    pub statements: Option<String>,
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
    /// HTTP: the `Origin` values accepted from browsers, `scheme://host[:port]` (default:
    /// loopback origins, any port). A request without `Origin` is not a browser's and is
    /// not checked; any other `Origin` is refused with 403, against DNS rebinding.
    pub allowed_origins: Option<Vec<String>>,
    /// The identity whose key space calls live in: the only one on stdio; on HTTP, the one
    /// of every request of a front without authentication (default `anonymous`). Refused
    /// on HTTP next to tokens or a gateway: there, a request's principal comes from its
    /// credential and nothing stands in for a missing one.
    pub principal: Option<String>,
    /// HTTP: a request header that names the principal, set by an authenticating gateway
    /// in front of the proxy (the OAuth subject, say). Honoured only on a request that
    /// carries the gateway's own token (`gateway_token`): without one it is refused at
    /// start.
    pub principal_header: Option<String>,
    /// HTTP: the gateway's bearer token, or the variable that holds it. A request with it
    /// is made for the principal its `principal_header` names.
    pub gateway_token: Option<String>,
    pub gateway_token_env: Option<String>,
    /// HTTP: serve a listen address other than loopback with no authentication at all,
    /// every request as `principal` (`anonymous`). Off: such a front refuses to start.
    #[serde(default)]
    pub allow_unauthenticated: bool,
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
    /// `pass` (forwarded as is), `dedupe`, or `auto` (the tool's annotations decide: a
    /// write, `readOnlyHint: false` or a `destructiveHint` without `idempotentHint: true`, is
    /// deduplicated; a read, an idempotent tool, or a tool without annotations passes).
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
    /// table naming a read tool (`{ reconcile = { tool = ..., ... } }`). Unset: `refuse`
    /// (the record waits for an operator), or `rerun` for a tool annotated
    /// `idempotentHint: true`.
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
        self.front.check(&|var| std::env::var(var).ok())
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
            if pg_idempotency_protocol::OnCacheHit::parse(w).is_none() {
                bail!(
                    "{at} on_cache_hit = {w:?}: expected one of {}",
                    pg_idempotency_protocol::OnCacheHit::listed()
                );
            }
        }
        if let Some(w) = &self.on_mismatch {
            if pg_idempotency_protocol::OnMismatch::parse(w).is_none() {
                bail!(
                    "{at} on_mismatch = {w:?}: expected one of {}",
                    pg_idempotency_protocol::OnMismatch::listed()
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "token-of-tenant-a-0123456789";
    const B: &str = "token-of-tenant-b-0123456789";
    const G: &str = "token-of-the-gateway-0123456789";

    /// The `[front]` table given, on HTTP, its variables from `vars`: Ok or the message.
    fn http(front: &str, vars: &[(&str, &str)]) -> Result<(), String> {
        let text = format!("[front]\ntransport = \"http\"\n{front}");
        let config: Config = toml::from_str(&text).map_err(|e| e.to_string())?;
        let env = |var: &str| {
            vars.iter()
                .find(|(k, _)| *k == var)
                .map(|(_, v)| v.to_string())
        };
        config.front.check(&env).map_err(|e| format!("{e:#}"))
    }

    fn refused(front: &str, vars: &[(&str, &str)], says: &str) {
        match http(front, vars) {
            Ok(()) => panic!("accepted: {front}"),
            Err(e) => assert!(e.contains(says), "{front}\n=> {e}"),
        }
    }

    fn clients() -> String {
        format!("clients = [{{ token = \"{A}\", principal = \"a\" }}, {{ token_env = \"B_TOKEN\", principal = \"b\" }}]\n")
    }

    #[test]
    fn a_principal_header_needs_a_gateway_credential() {
        refused(
            "principal_header = \"x-principal\"\n",
            &[],
            "gateway_token_env",
        );
        refused(
            &format!("principal_header = \"x-principal\"\n{}", clients()),
            &[("B_TOKEN", B)],
            "without a gateway credential",
        );
        refused(
            &format!("gateway_token = \"{G}\"\n"),
            &[],
            "set principal_header",
        );
        refused(
            "principal_header = \"authorization\"\ngateway_token_env = \"G\"\n",
            &[("G", G)],
            "carries credentials",
        );
        refused(
            &format!(
                "principal_header = \"x-p\"\ngateway_token = \"{G}\"\ngateway_token_env = \"G\"\n"
            ),
            &[("G", G)],
            "both gateway_token and gateway_token_env",
        );
        assert_eq!(
            http(
                &format!(
                    "principal_header = \"x-principal\"\ngateway_token_env = \"G\"\n{}",
                    clients()
                ),
                &[("G", G), ("B_TOKEN", B)]
            ),
            Ok(())
        );
    }

    #[test]
    fn no_default_principal_next_to_credentials() {
        refused(
            &format!("principal = \"ops\"\n{}", clients()),
            &[("B_TOKEN", B)],
            "Remove principal",
        );
        refused(
            &format!("principal = \"ops\"\nprincipal_header = \"x-p\"\ngateway_token = \"{G}\"\n"),
            &[],
            "Remove principal",
        );
        refused(
            &format!("allow_unauthenticated = true\n{}", clients()),
            &[("B_TOKEN", B)],
            "remove one of them",
        );
        // On stdio the principal is the only one, and tokens are not used.
        let stdio: Config = toml::from_str(
            "[front]\nprincipal = \"ops\"\nclients = [{ token = \"short\", principal = \"a\" }]\n",
        )
        .unwrap();
        assert!(stdio.check().is_ok());
    }

    #[test]
    fn tokens_must_be_long_distinct_and_set() {
        refused(&clients(), &[], "the variable B_TOKEN is not set");
        refused(&clients(), &[("B_TOKEN", "")], "variable B_TOKEN is empty");
        refused(&clients(), &[("B_TOKEN", "fifteen-bytes!!")], "15 bytes");
        refused(&clients(), &[("B_TOKEN", A)], "same token");
        refused(
            "clients = [{ token = \"\", principal = \"a\" }]\n",
            &[],
            "entry 1 (principal \"a\"): its token is empty",
        );
        refused(
            &format!("clients = [{{ token = \"{A}\", principal = \" \" }}]\n"),
            &[],
            "names no principal",
        );
        refused(
            &format!("clients = [{{ token = \"{A}\", token_env = \"X\", principal = \"a\" }}]\n"),
            &[],
            "exactly one of token and token_env",
        );
        refused(
            &format!(
                "principal_header = \"x-p\"\ngateway_token_env = \"G\"\n{}",
                clients()
            ),
            &[("G", B), ("B_TOKEN", B)],
            "same token",
        );
        for (var, value) in [("B_TOKEN", "fifteen-bytes!!"), ("B_TOKEN", A)] {
            let e = http(&clients(), &[(var, value)]).unwrap_err();
            assert!(!e.contains(value), "the token is shown: {e}");
        }
        assert_eq!(http(&clients(), &[("B_TOKEN", B)]), Ok(()));
    }

    #[test]
    fn no_authentication_stays_on_loopback_unless_named() {
        for open in [
            "",
            "listen = \"127.0.0.1:0\"\n",
            "listen = \"[::1]:8931\"\n",
            "listen = \"localhost:8931\"\n",
            "principal = \"ops\"\n",
        ] {
            assert_eq!(http(open, &[]), Ok(()), "{open}");
        }
        for exposed in [
            "listen = \"0.0.0.0:8931\"\n",
            "listen = \"[::]:8931\"\n",
            "listen = \"10.1.2.3:8931\"\n",
            "listen = \"mcp.internal:8931\"\n",
        ] {
            refused(exposed, &[], "allow_unauthenticated = true");
            assert_eq!(
                http(&format!("{exposed}allow_unauthenticated = true\n"), &[]),
                Ok(())
            );
        }
    }

    #[test]
    fn allowed_origins_are_origins() {
        assert_eq!(
            http(
                "allowed_origins = [\"https://app.example\", \"http://localhost:5173/\"]\n",
                &[]
            ),
            Ok(())
        );
        refused(
            "allowed_origins = [\"app.example\"]\n",
            &[],
            "write scheme://host[:port]",
        );
    }
}
