//! A provider's `Retry-After` (RFC 9110, 10.2.3): seconds, or an HTTP date.

use std::time::{Duration, SystemTime};

/// How long from `now` the provider asks us to wait; a date already past is no wait, and
/// a value that is neither form is ignored (the retry loop's own backoff applies).
pub(crate) fn parse(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is "a very long time", not "no advice".
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn seconds() {
        let now = SystemTime::now();
        assert_eq!(parse("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn an_http_date_counts_from_now() {
        // Sun, 06 Nov 1994 08:49:37 GMT, RFC 9110's example, is 784111777.
        let date = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(parse(date, at(784_111_770)), Some(Duration::from_secs(7)));
        assert_eq!(parse(date, at(784_111_800)), Some(Duration::ZERO));
    }

    #[test]
    fn anything_else_is_no_advice() {
        let now = SystemTime::now();
        for v in ["", "-5", "1.5", "soon", "Sun, 06 Nov 1994"] {
            assert_eq!(parse(v, now), None, "{v:?}");
        }
    }
}
