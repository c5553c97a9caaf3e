//! `[limits]`: every resource a caller can make the proxy hold has a bound, each with a safe
//! default, each named in the error that refuses it (`limits.<member>`), so that an operator
//! knows which one to raise (waiting duplicates over their caps are answered as a duplicate
//! without `wait` is, not refused). docs/mcp.md ("Limits") is the reference.

use anyhow::{bail, Context, Result};
use std::num::NonZeroUsize;
use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData};
use serde::{Deserialize, Deserializer};

use crate::duration::parse_duration;

/// The JSON-RPC code of a limit reached (docs/mcp.md "Errors"): `data.limit` names the
/// setting.
pub const LIMIT_REACHED: i32 = -32078;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    // The HTTP front: its sessions, its connections, and the upstream processes behind them.
    /// Live sessions on the HTTP front, all principals together (503 past it).
    pub max_sessions: NonZeroUsize,
    /// Live sessions of one principal (429 past it): one tenant cannot take them all.
    pub max_sessions_per_principal: NonZeroUsize,
    /// A session that has not called a tool is ended after this long without a request: an
    /// `initialize` alone holds an upstream process, and costs nothing to send.
    #[serde(deserialize_with = "duration")]
    pub idle_before_first_call: Duration,
    /// Any session is ended after this long with no message either way (rmcp's keep-alive).
    #[serde(deserialize_with = "duration")]
    pub session_idle_timeout: Duration,
    /// Upstream child processes alive at once (a stdio upstream: one per session).
    pub max_upstream_processes: NonZeroUsize,
    /// Open HTTP connections; the next one is answered 503 and closed.
    pub max_connections: NonZeroUsize,
    /// How long a connection may take to send a request's headers, counted from when the
    /// proxy waits for them (the connection's start, or the end of the previous answer).
    #[serde(deserialize_with = "duration")]
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed (a body sent
    /// too slowly, an answer not read). An answer stream's pings come more often than this.
    #[serde(deserialize_with = "duration")]
    pub connection_idle_timeout: Duration,

    // --- Waiting duplicates and the records' connections (mcp/src/waiters.rs) ---
    //
    // A duplicate of a running call waits for its result inside `idem_begin(..., wait)`,
    // holding a connection of the pool all along. Unbounded, a crowd of one principal's
    // duplicates holds every connection, and every other principal's calls wait behind it.
    /// Duplicates of one principal that may wait at once for a running call's result
    /// (default 4). One more is answered at once, as a duplicate without `wait` is: its
    /// call's result if there is one, else `in_progress` with `retryAfterMs`.
    pub max_waiting_per_principal: Option<usize>,
    /// Connections of `[database] pool_size` that waiting duplicates never take, all
    /// principals together: left for new calls, replays and lookups (default 2, and at
    /// most `pool_size - 1`).
    pub reserved_connections: Option<usize>,
    /// How long a call waits for a connection of the pool before it is answered -32075
    /// `store_unavailable` (default `5s`).
    pub pool_wait_timeout: Option<String>,
    /// Connections of their own, beside the pool, for running calls' lease extensions
    /// (the heartbeat), results and releases (default 2): no crowd of waiting duplicates
    /// delays a heartbeat until its lease lapses and a duplicate takes the call over.
    pub heartbeat_connections: Option<usize>,

    /// On its way out (stdin closed, SIGTERM, Ctrl-C), how long the proxy waits for the
    /// results it has already answered to be recorded (recordings.rs) before it exits.
    #[serde(deserialize_with = "duration")]
    pub recording_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        let n = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
        Limits {
            max_sessions: n(128),
            max_sessions_per_principal: n(32),
            idle_before_first_call: Duration::from_secs(60),
            session_idle_timeout: Duration::from_secs(300),
            max_upstream_processes: n(128),
            max_connections: n(512),
            header_read_timeout: Duration::from_secs(10),
            connection_idle_timeout: Duration::from_secs(120),
            max_waiting_per_principal: None,
            reserved_connections: None,
            pool_wait_timeout: None,
            heartbeat_connections: None,
            recording_grace: Duration::from_secs(10),
        }
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(|e| serde::de::Error::custom(format!("{e:#}")))
}

/// A limit reached, as the MCP client is told over JSON-RPC.
pub fn reached(
    limit: &str,
    message: String,
    hint: &str,
    retry_after: Option<Duration>,
) -> ErrorData {
    let mut data = serde_json::json!({
        "kind": "limit_reached",
        "limit": format!("limits.{limit}"),
        "hint": hint,
    });
    if let Some(r) = retry_after {
        data["retryAfterMs"] = serde_json::json!(r.as_millis() as u64);
    }
    ErrorData::new(ErrorCode(LIMIT_REACHED), message, Some(data))
}

/// The default of `max_waiting_per_principal`.
pub const DEFAULT_MAX_WAITING_PER_PRINCIPAL: usize = 4;
/// The default of `reserved_connections` (kept below the pool's size).
pub const DEFAULT_RESERVED_CONNECTIONS: usize = 2;
/// The default of `pool_wait_timeout`.
pub const DEFAULT_POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default of `heartbeat_connections`.
pub const DEFAULT_HEARTBEAT_CONNECTIONS: usize = 2;

impl Limits {
    /// Everything a call would trip on later, refused at start.
    pub fn check(&self, pool_size: usize) -> Result<()> {
        if pool_size == 0 {
            bail!("[database] pool_size = 0: every call would wait for a connection in vain");
        }
        if let Some(t) = &self.pool_wait_timeout {
            parse_duration(t).context("[limits] pool_wait_timeout")?;
        }
        if let Some(r) = self.reserved_connections {
            if r >= pool_size {
                bail!("[limits] reserved_connections = {r} leaves no connection of the {pool_size} of [database] pool_size for waiting duplicates: at most {}", pool_size.saturating_sub(1));
            }
        }
        if self.heartbeat_connections == Some(0) {
            bail!("[limits] heartbeat_connections = 0: running calls need at least one connection for their heartbeat and result");
        }
        Ok(())
    }

    pub fn max_waiting_per_principal(&self) -> usize {
        self.max_waiting_per_principal
            .unwrap_or(DEFAULT_MAX_WAITING_PER_PRINCIPAL)
    }

    /// Waiting duplicates of all principals at once: the pool less its reserve.
    pub fn max_waiting(&self, pool_size: usize) -> usize {
        let reserved = self
            .reserved_connections
            .unwrap_or(DEFAULT_RESERVED_CONNECTIONS.min(pool_size.saturating_sub(1)));
        pool_size.saturating_sub(reserved)
    }

    pub fn pool_wait_timeout(&self) -> Duration {
        self.pool_wait_timeout
            .as_deref()
            .and_then(|t| parse_duration(t).ok())
            .unwrap_or(DEFAULT_POOL_WAIT_TIMEOUT)
    }

    pub fn heartbeat_connections(&self) -> usize {
        self.heartbeat_connections
            .unwrap_or(DEFAULT_HEARTBEAT_CONNECTIONS)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let l: Limits =
            toml::from_str("max_sessions = 3\nidle_before_first_call = \"2s\"").unwrap();
        assert_eq!(l.max_sessions.get(), 3);
        assert_eq!(l.idle_before_first_call, Duration::from_secs(2));
        assert_eq!(
            l.max_sessions_per_principal,
            Limits::default().max_sessions_per_principal
        );
        for bad in [
            "max_sessions = 0",
            "header_read_timeout = \"0s\"",
            "header_read_timeout = \"soon\"",
            "max_session = 3",
        ] {
            assert!(toml::from_str::<Limits>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_leave_connections_free() {
        let l = Limits::default();
        assert_eq!(l.max_waiting_per_principal(), 4);
        assert_eq!(l.max_waiting(8), 6);
        // A pool of two keeps one connection from waiting duplicates; a pool of one has
        // none to keep (the heartbeat's connections are apart from it).
        assert_eq!(l.max_waiting(2), 1);
        assert_eq!(l.max_waiting(1), 1);
        assert_eq!(l.pool_wait_timeout(), Duration::from_secs(5));
        assert_eq!(l.heartbeat_connections(), 2);
        l.check(8).unwrap();
    }

    #[test]
    fn a_reserve_of_the_whole_pool_is_refused() {
        let l = Limits {
            reserved_connections: Some(4),
            ..Limits::default()
        };
        assert!(l.check(4).is_err());
        assert!(Limits::default().check(0).is_err());
        l.check(5).unwrap();
        assert_eq!(l.max_waiting(5), 1);
    }

    #[test]
    fn bad_values_are_refused() {
        let l = Limits {
            pool_wait_timeout: Some("soon".into()),
            ..Limits::default()
        };
        assert!(l.check(8).is_err());
        let l = Limits {
            heartbeat_connections: Some(0),
            ..Limits::default()
        };
        assert!(l.check(8).is_err());
    }
}
