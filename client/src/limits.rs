//! The argument limits of the SQL API, for the stores that check them themselves, and
//! what no store can hold (NUL in a scope or key, U+0000 in a response), which every store
//! refuses before it sends or stores anything.

use std::time::Duration;

use pg_idempotency_protocol::settings;

use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};

// The server's defaults (protocol/src/settings.rs), for the stores that hold records
// themselves: the same limits a server that nobody configured applies.
pub const MAX_KEY_BYTES: usize = settings::MAX_KEY_BYTES.default as usize;
pub const MAX_SCOPE_BYTES: usize = settings::MAX_SCOPE_BYTES.default as usize;
pub const MAX_TTL: Duration = Duration::from_secs(settings::MAX_TTL.default as u64);
pub const DEFAULT_TTL: Duration = Duration::from_secs(settings::DEFAULT_TTL.default as u64);
/// How long past its ttl a record whose outcome is unknown is kept, unless a call says.
pub const DEFAULT_UNRESOLVED_TTL: Duration =
    Duration::from_secs(settings::UNRESOLVED_TTL.default as u64);
pub const DEFAULT_LEASE: Duration = Duration::from_secs(settings::DEFAULT_LEASE.default as u64);
pub const MAX_RESPONSE_BYTES: usize = settings::MAX_RESPONSE_BYTES.default as usize;

/// A scope or key within its limit, refused in the SQL API's words (its message, detail and
/// hint), so that a store checking it itself answers as the server does.
pub fn text(name: &str, value: &str, max: usize) -> Result<()> {
    without_nul(name, value)?;
    if value.trim().is_empty() {
        return Err(Error::invalid(format!("{name} must not be blank"))
            .with_detail(format!("The {name} is empty or only whitespace."))
            .with_hint(format!("Pass a non-blank {name}.")));
    }
    if value.len() > max {
        return Err(Error::invalid(format!("{name} is too long"))
            .with_detail(format!(
                "The {name} has {} bytes; the limit is {max}.",
                value.len()
            ))
            // The server's hint also names its setting; this store's limit is fixed.
            .with_hint(format!("Use a shorter {name}.")));
    }
    Ok(())
}

/// PostgreSQL text cannot hold NUL: the server would refuse it while reading the
/// parameter (22021), an error that says nothing of which argument was wrong. Refused here
/// as an argument error, in the words the server uses for its other scope and key checks.
pub fn without_nul(name: &str, value: &str) -> Result<()> {
    match value.find('\0') {
        None => Ok(()),
        Some(at) => Err(Error::invalid(format!("{name} must not contain NUL"))
            .with_detail(format!(
                "The {name} has the character U+0000 at byte {at}, which PostgreSQL text cannot hold."
            ))
            .with_hint(format!("Pass a {name} without NUL."))),
    }
}

/// The NUL check alone, for the stores that leave the other limits to the server (whose
/// limits are settings) or have nothing to look up under such a name.
pub fn scope_and_key_without_nul(scope: &str, key: &str) -> Result<()> {
    without_nul("scope", scope)?;
    without_nul("key", key)
}

/// A response is stored as `jsonb`, which cannot hold U+0000 (the server refuses it while
/// reading the parameter, 22P05). No store can hold such a response, whatever its
/// contents otherwise, so it is the caller's argument that is wrong: InvalidArgument
/// (not Uncanonicalizable, which is about requests: a response is never canonicalized;
/// not Serialization, which is the client failing to encode or decode a value). Refused
/// before anything changes, so the claim stays held and its holder can complete it with a
/// response that can be stored, or release it. A walk over the value (canon's U+0000
/// check), no serialisation.
pub fn response(response: Option<&Value>) -> Result<()> {
    match response.map(pg_idempotency_canon::check_nul) {
        Some(Err(_)) => Err(Error::invalid("response must not contain U+0000")
            .with_detail(
                "A string or member name of the response has the character U+0000, which jsonb cannot hold.",
            )
            .with_hint(
                "Encode such data (base64, for example) or leave the U+0000 out; the claim is still held: complete it again or release it.",
            )),
        _ => Ok(()),
    }
}

/// A duration as the SQL API's messages show it, in seconds.
fn seconds(d: Duration) -> String {
    let micros = d.as_micros();
    if micros.is_multiple_of(1_000_000) {
        format!("{} s", micros / 1_000_000)
    } else {
        format!("{} s", micros as f64 / 1e6)
    }
}

fn bounded(name: &str, d: Duration, allow_zero: bool) -> Result<Duration> {
    if d.is_zero() && !allow_zero {
        return Err(Error::invalid(format!("{name} must be positive"))
            .with_detail(format!("The {name} normalises to {}.", seconds(d)))
            .with_hint(format!("Pass a {name} such as '30 seconds'.")));
    }
    if d > MAX_TTL {
        return Err(Error::invalid(format!("{name} is too long"))
            .with_detail(format!(
                "The {name} normalises to {}; the limit is {}.",
                seconds(d),
                seconds(MAX_TTL)
            ))
            .with_hint(format!("Pass a shorter {name}.")));
    }
    Ok(d)
}

/// A ttl or lease: positive, at most `MAX_TTL`.
pub fn duration(name: &str, d: Duration) -> Result<Duration> {
    bounded(name, d, false)
}

/// The unresolved bound in force: the given one (positive, at most `MAX_TTL`), else the
/// default, `pg_idempotency.unresolved_ttl`'s.
pub fn unresolved_ttl(given: Option<Duration>) -> Result<Duration> {
    duration("unresolved_ttl", given.unwrap_or(DEFAULT_UNRESOLVED_TTL))
}

/// How long `begin` may wait for a live holder: zero or more, at most `MAX_TTL`.
pub fn wait(d: Duration) -> Result<Duration> {
    bounded("wait", d, true)
}

/// The lease in force: the given one (at most the ttl), else the default capped by the ttl.
pub fn lease_for(lease: Option<Duration>, ttl: Duration) -> Result<Duration> {
    match lease {
        Some(l) if l > ttl => Err(Error::invalid("lease must not exceed ttl")
            .with_detail(format!(
                "The lease is {} and the ttl {}.",
                seconds(l),
                seconds(ttl)
            ))
            .with_hint(
                "Pass a shorter lease or a longer ttl; extend a long call's lease with extend.",
            )),
        Some(l) => Ok(l),
        None => Ok(DEFAULT_LEASE.min(ttl)),
    }
}

/// The ttl and lease of a `begin`, checked in the server's order: ttl, lease, wait, then
/// the lease against the ttl.
pub fn begin_durations(
    ttl: Option<Duration>,
    lease: Option<Duration>,
    wait_for: Duration,
) -> Result<(Duration, Duration)> {
    let ttl = duration("ttl", ttl.unwrap_or(DEFAULT_TTL))?;
    let lease = lease.map(|l| duration("lease", l)).transpose()?;
    wait(wait_for)?;
    Ok((ttl, lease_for(lease, ttl)?))
}

pub fn scope_and_key(scope: &str, key: &str) -> Result<()> {
    text("scope", scope, MAX_SCOPE_BYTES)?;
    text("key", key, MAX_KEY_BYTES)
}

/// A response within the server's default `max_response_bytes`, for the stores that hold
/// records themselves, so that a response PostgreSQL would refuse is not kept in memory or
/// Redis instead. Measured as compact JSON text, which is what these stores keep; the
/// server measures its jsonb form, which differs by a few percent either way, so only a
/// response near the limit can be taken by one and refused by the other. Refused before
/// anything changes: the claim stays held.
pub fn response_size(response: Option<&Value>) -> Result<()> {
    let Some(value) = response else {
        return Ok(());
    };
    let mut counted = Counter(0);
    // Writing to a counter cannot fail, and a Value always serializes.
    let _ = serde_json::to_writer(&mut counted, value);
    response_bytes(counted.0)
}

/// As `response_size`, for a store that has the response's JSON text already.
pub fn response_bytes(bytes: usize) -> Result<()> {
    if bytes <= MAX_RESPONSE_BYTES {
        return Ok(());
    }
    Err(Error::new(ErrorKind::ResponseTooLarge, "response is too large")
        .with_detail(format!(
            "The response takes {bytes} bytes as JSON text; the limit is {MAX_RESPONSE_BYTES}."
        ))
        .with_hint(
            "Store a smaller response (a reference to the result instead of the result); the claim is still held: complete it again or release it.",
        ))
}

/// Counts what is written, keeping none of it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
