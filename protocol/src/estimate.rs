//! How long a duplicate is told to wait (`retry_after`) while another attempt runs the call.
//!
//! Every store keeps, per scope (and, in PostgreSQL, per owning role), an estimate of how
//! long calls take from claim to completion, and answers a duplicate with the estimated
//! time left for the running attempt:
//!
//! ```text
//! elapsed     = now - claimed_at            (the running attempt's claim, a takeover's own)
//! lease_left  = lease_until - now
//! retry_after = min(lease_left, max(FLOOR, estimate - elapsed))    with an estimate
//! retry_after = min(lease_left, UNKNOWN)                            without one
//! ```
//!
//! A sample is taken at each completion of a claimed attempt (succeeded, failed, or an
//! uncached failure): `completed_at - claimed_at`. A release is no sample: the call did
//! not finish. The extension and the client's stores keep an exponentially weighted mean,
//! `estimate += (sample - estimate) / WEIGHT` (the first sample is the estimate); the
//! PL/pgSQL variant, which has no shared memory, takes the mean of up to
//! `PORTABLE_SAMPLE` completed records of the scope (so an uncached failure, which leaves
//! no record, is no sample there). The extension's table of estimates forgets the least
//! recently sampled scope when a new one needs its place: scopes are many, advice is cheap.

/// The least `retry_after` while the lease lasts: an attempt running past its estimate is
/// not polled in a tight loop.
pub const FLOOR_MS: u64 = 100;

/// `retry_after` when the scope has no completed call yet.
pub const UNKNOWN_MS: u64 = 1_000;

/// Each new sample moves the estimate by 1/WEIGHT of its distance.
pub const WEIGHT: u32 = 4;

/// How many completed records the PL/pgSQL variant averages.
pub const PORTABLE_SAMPLE: u32 = 32;

/// The estimated time left, in milliseconds, under the formula above. Negative inputs
/// (a clock step) count as zero.
pub fn retry_after_ms(estimate_ms: Option<u64>, elapsed_ms: u64, lease_left_ms: u64) -> u64 {
    bounded(estimate_ms, elapsed_ms, lease_left_ms, 1)
}

/// The same in microseconds (the extension's clock).
pub fn retry_after_us(estimate_us: Option<u64>, elapsed_us: u64, lease_left_us: u64) -> u64 {
    bounded(estimate_us, elapsed_us, lease_left_us, 1000)
}

fn bounded(estimate: Option<u64>, elapsed: u64, lease_left: u64, per_ms: u64) -> u64 {
    let wanted = match estimate {
        Some(e) => e.saturating_sub(elapsed).max(FLOOR_MS * per_ms),
        None => UNKNOWN_MS * per_ms,
    };
    wanted.min(lease_left)
}

/// The estimate after one more sample (the arithmetic is the same in any one unit: the
/// extension keeps microseconds).
pub fn next_estimate(estimate: Option<u64>, sample: u64) -> u64 {
    match estimate {
        None => sample,
        Some(e) => {
            let (e, s, w) = (e as i128, sample as i128, WEIGHT as i128);
            (e + (s - e) / w).max(0) as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_is_bounded_by_the_floor_and_the_lease() {
        assert_eq!(retry_after_ms(Some(1_500), 400, 60_000), 1_100);
        assert_eq!(retry_after_ms(Some(1_500), 1_450, 60_000), FLOOR_MS);
        assert_eq!(retry_after_ms(Some(1_500), 9_000, 60_000), FLOOR_MS);
        assert_eq!(retry_after_ms(Some(90_000), 0, 60_000), 60_000);
        assert_eq!(retry_after_ms(Some(1_500), 0, 20), 20);
        assert_eq!(retry_after_ms(None, 0, 60_000), UNKNOWN_MS);
        assert_eq!(retry_after_ms(None, 0, 300), 300);
        assert_eq!(
            retry_after_us(Some(1_500_000), 400_000, 60_000_000),
            1_100_000
        );
        assert_eq!(retry_after_us(None, 0, 60_000_000), UNKNOWN_MS * 1000);
        assert_eq!(retry_after_us(Some(1), 0, 60_000_000), FLOOR_MS * 1000);
    }

    #[test]
    fn the_estimate_moves_a_quarter_of_the_way() {
        assert_eq!(next_estimate(None, 800), 800);
        assert_eq!(next_estimate(Some(800), 1_600), 1_000);
        assert_eq!(next_estimate(Some(1_000), 200), 800);
    }
}
