//! The argument limits of the SQL API, for the stores that check them themselves.

use std::time::Duration;

use crate::error::{Error, Result};

pub const MAX_KEY_BYTES: usize = 512;
pub const MAX_SCOPE_BYTES: usize = 128;
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

pub fn text(name: &str, value: &str, max: usize) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(format!("{name} must not be blank")));
    }
    if value.len() > max {
        return Err(
            Error::invalid(format!("{name} is too long")).with_detail(format!(
                "The {name} has {} bytes; the limit is {max}.",
                value.len()
            )),
        );
    }
    Ok(())
}

pub fn duration(name: &str, d: Duration) -> Result<Duration> {
    if d.is_zero() {
        return Err(Error::invalid(format!("{name} must be positive")));
    }
    if d > MAX_TTL {
        return Err(Error::invalid(format!("{name} is too long")));
    }
    Ok(d)
}

pub fn lease_for(lease: Option<Duration>, ttl: Duration) -> Result<Duration> {
    match lease {
        Some(l) if duration("lease", l)? > ttl => Err(Error::invalid("lease must not exceed ttl")),
        Some(l) => Ok(l),
        None => Ok(DEFAULT_LEASE.min(ttl)),
    }
}

pub fn scope_and_key(scope: &str, key: &str) -> Result<()> {
    text("scope", scope, MAX_SCOPE_BYTES)?;
    text("key", key, MAX_KEY_BYTES)
}
