//! `[limits]`: every resource a caller can make the proxy hold has a bound, each with a safe
//! default, each named in the error that refuses it (`limits.<member>`), so that an operator
//! knows which one to raise. docs/mcp.md ("Limits") is the reference.

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
}
