//! The `[limits]` table: bounds that keep one principal, or one crowd of requests, from
//! taking what every other call needs. Each has a safe default; docs/mcp.md ("Limits")
//! says what a caller is answered when one is reached.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::duration::parse_duration;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Limits {
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
