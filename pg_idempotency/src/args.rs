//! Validation of arguments, before anything is read or written.
//! Durations are normalised as PostgreSQL compares intervals: a month is 30 days and a day
//! 24 hours, so `'1 month'` and `'30 days'` are the same ttl.

use pgrx::datum::Interval;

pub use pg_idempotency_protocol::{OnCacheHit, OnMismatch};

use crate::error::{IdemError, IdemResult};
use crate::gucs;

pub const MICROS_PER_DAY: i128 = 86_400_000_000;

/// Microseconds of an interval, or None when it is infinite.
pub fn interval_micros(iv: &Interval) -> Option<i128> {
    let raw = iv.into_inner();
    raw_interval_micros(raw.month, raw.day, raw.time)
}

/// The same, from an interval's three fields.
pub fn raw_interval_micros(month: i32, day: i32, time: i64) -> Option<i128> {
    let infinite = (month == i32::MAX && day == i32::MAX && time == i64::MAX)
        || (month == i32::MIN && day == i32::MIN && time == i64::MIN);
    if infinite {
        return None;
    }
    Some(month as i128 * 30 * MICROS_PER_DAY + day as i128 * MICROS_PER_DAY + time as i128)
}

pub fn micros_interval(micros: i64) -> Interval {
    // A pure time interval never has mixed signs, so this cannot fail.
    Interval::new(0, 0, micros).unwrap_or_else(|_| unreachable!())
}

/// A duration for messages, in seconds.
pub fn seconds(micros: i128) -> String {
    if micros % 1_000_000 == 0 {
        format!("{} s", micros / 1_000_000)
    } else {
        format!("{} s", micros as f64 / 1e6)
    }
}

fn blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

fn text_arg(name: &str, value: Option<String>, max: usize, setting: &str) -> IdemResult<String> {
    let value = value.ok_or_else(|| {
        IdemError::invalid(
            format!("{name} must not be null"),
            format!("idem_* functions need a {name} to find the record."),
            format!("Pass a non-blank {name}."),
        )
    })?;
    if blank(&value) {
        return Err(IdemError::invalid(
            format!("{name} must not be blank"),
            format!("The {name} is empty or only whitespace."),
            format!("Pass a non-blank {name}."),
        ));
    }
    if value.len() > max {
        return Err(IdemError::invalid(
            format!("{name} is too long"),
            format!("The {name} has {} bytes; the limit is {max}.", value.len()),
            format!("Use a shorter {name}, or raise {setting}."),
        ));
    }
    Ok(value)
}

pub fn scope(value: Option<String>) -> IdemResult<String> {
    text_arg(
        "scope",
        value,
        gucs::max_scope_bytes(),
        "pg_idempotency.max_scope_bytes",
    )
}

pub fn key(value: Option<String>) -> IdemResult<String> {
    text_arg(
        "key",
        value,
        gucs::max_key_bytes(),
        "pg_idempotency.max_key_bytes",
    )
}

/// A positive, finite duration no longer than `pg_idempotency.max_ttl`.
fn duration(name: &str, iv: &Interval, allow_zero: bool) -> IdemResult<i64> {
    let max = gucs::max_ttl_micros();
    let Some(us) = interval_micros(iv) else {
        return Err(IdemError::invalid(
            format!("{name} must be finite"),
            format!("The {name} is infinite."),
            format!(
                "Pass a {name} of at most pg_idempotency.max_ttl ({} s).",
                max / 1_000_000
            ),
        ));
    };
    if us < 0 || (us == 0 && !allow_zero) {
        return Err(IdemError::invalid(
            format!(
                "{name} must be {}",
                if allow_zero {
                    "zero or positive"
                } else {
                    "positive"
                }
            ),
            format!("The {name} normalises to {}.", seconds(us)),
            format!("Pass a {name} such as '30 seconds'."),
        ));
    }
    if us > max as i128 {
        return Err(IdemError::invalid(
            format!("{name} is too long"),
            format!(
                "The {name} normalises to {}; the limit is {}.",
                seconds(us),
                seconds(max as i128)
            ),
            format!("Pass a shorter {name}, or raise pg_idempotency.max_ttl."),
        ));
    }
    Ok(us as i64)
}

/// A ttl given by a call or a policy: positive, finite, at most `max_ttl`.
pub fn ttl(value: Option<Interval>) -> IdemResult<Option<i64>> {
    value.map(|iv| duration("ttl", &iv, false)).transpose()
}

/// A lease given by a call or a policy: positive, finite, at most `max_ttl` (and at most
/// the ttl, once that is known: see [`effective_lease`]).
pub fn lease(value: Option<Interval>) -> IdemResult<Option<i64>> {
    value.map(|iv| duration("lease", &iv, false)).transpose()
}

/// An unresolved bound given by a call: positive, finite, at most `max_ttl`.
pub fn unresolved_ttl(value: Option<Interval>) -> IdemResult<Option<i64>> {
    value
        .map(|iv| duration("unresolved_ttl", &iv, false))
        .transpose()
}

/// The unresolved bound in force: the call's, else the scope's policy, else
/// `pg_idempotency.unresolved_ttl`, never above `max_ttl` (which may be lower than the
/// setting, or have been lowered since the policy was set).
pub fn effective_unresolved_ttl(given: Option<i64>, policy: Option<i64>) -> i64 {
    given
        .or(policy)
        .unwrap_or_else(gucs::unresolved_ttl_micros)
        .min(gucs::max_ttl_micros())
}

/// The ttl in force: the call's, else the policy's, else `pg_idempotency.default_ttl`;
/// checked again, since `max_ttl` may have been lowered after a policy was set.
pub fn effective_ttl(given: Option<i64>, policy: Option<i64>) -> IdemResult<i64> {
    match given.or(policy) {
        Some(us) => Ok(us),
        None => duration("ttl", &micros_interval(gucs::default_ttl_micros()), false),
    }
}

/// The lease in force: the call's (which may not exceed the ttl), else the policy's or
/// `pg_idempotency.default_lease`, capped by the ttl.
pub fn effective_lease(given: Option<i64>, policy: Option<i64>, ttl: i64) -> IdemResult<i64> {
    match given {
        Some(lease) if lease > ttl => Err(IdemError::invalid(
            "lease must not exceed ttl",
            format!(
                "The lease is {} and the ttl {}.",
                seconds(lease as i128),
                seconds(ttl as i128)
            ),
            "Pass a shorter lease or a longer ttl; extend a long call with idem_extend.",
        )),
        Some(lease) => Ok(lease),
        None => Ok(policy.unwrap_or_else(gucs::default_lease_micros).min(ttl)),
    }
}

pub fn wait(value: Option<Interval>) -> IdemResult<i64> {
    match value {
        None => Ok(0),
        Some(iv) => duration("wait", &iv, true),
    }
}

pub fn fence(value: Option<i64>) -> IdemResult<i64> {
    value.ok_or_else(|| {
        IdemError::invalid(
            "fence must not be null",
            "Only the holder of a claim may complete, release or extend it, named by its fence.",
            "Pass the fence that idem_begin returned with outcome 'claimed'.",
        )
    })
}

/// The on_cache_hit word given by a call or a policy, if any.
pub fn on_cache_hit(value: Option<&str>) -> IdemResult<Option<OnCacheHit>> {
    word("on_cache_hit", value, OnCacheHit::parse, OnCacheHit::listed)
}

/// The on_mismatch word given by a call or a policy, if any.
pub fn on_mismatch(value: Option<&str>) -> IdemResult<Option<OnMismatch>> {
    word("on_mismatch", value, OnMismatch::parse, OnMismatch::listed)
}

fn word<W>(
    name: &str,
    value: Option<&str>,
    parse: fn(&str) -> Option<W>,
    listed: fn() -> String,
) -> IdemResult<Option<W>> {
    let Some(got) = value else {
        return Ok(None);
    };
    match parse(got) {
        Some(w) => Ok(Some(w)),
        None => {
            let shown: String = got.chars().take(64).collect();
            let words = listed();
            Err(IdemError::invalid(
                format!("unknown {name} \"{shown}\""),
                format!("{name} takes one of: {words}."),
                format!(
                    "Pass one of those words, or NULL for the default ({}).",
                    words.split(',').next().unwrap_or("")
                ),
            ))
        }
    }
}
