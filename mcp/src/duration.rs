//! Durations as the configuration writes them: a number and a unit (`250ms`, `30s`, `5m`,
//! `24h`, `7d`).

use std::time::Duration;

use anyhow::{bail, Result};

pub fn parse_duration(text: &str) -> Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let Ok(n) = number.parse::<f64>() else {
        bail!("{text:?} is not a duration: write a number and a unit, such as 30s or 24h");
    };
    let seconds = match unit.trim() {
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        other => bail!("{text:?}: unknown unit {other:?} (ms, s, m, h or d)"),
    };
    if !seconds.is_finite() || seconds <= 0.0 {
        bail!("{text:?}: a duration must be positive");
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1.5m").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86400));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        for bad in ["", "10", "h", "10 weeks", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
