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
//! retry_after = lease_left                    when the holder has stopped beating (below)
//! ```
//!
//! A holder **has stopped beating** when `lease_left < lease / STOPPED_DIVISOR`, `lease`
//! being the length of the lease it last took (its claim, a takeover, its last extension;
//! 0.9.0 on, unknown for records claimed before, which keep the rule above). The client's
//! heartbeat (client/src/lease.rs) renews every `lease / 3`, so a holder beating on time
//! never has less than two thirds of its lease left: it counts as stopped only once a
//! renewal is late by a whole period (a loaded machine's slack; a lease under 60 ms, which
//! the heartbeat renews every 20 ms at the least, has none). A SQL caller that never
//! extends counts as stopped after two thirds of its lease. A duplicate of a stopped holder
//! is told the lease's time left (a retry then takes the call over, or finds it done), not
//! the estimate's floor, and a waiting duplicate stops waiting (`idem_begin`'s `wait`).
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

/// A holder with less than `lease / STOPPED_DIVISOR` of its lease left has stopped beating
/// (see above): the heartbeat renews every `lease / 3`.
pub const STOPPED_DIVISOR: u64 = 3;

/// Whether a holder whose last lease was `lease` long, with `lease_left` of it left, has
/// stopped beating (any one unit). An unknown length (a claim before 0.9.0) never has.
pub fn stopped(lease: Option<u64>, lease_left: u64) -> bool {
    lease.is_some_and(|l| lease_left.saturating_mul(STOPPED_DIVISOR) < l)
}

/// How long until a holder beating no more counts as stopped: zero once it does; the
/// lease's time left when its length is unknown (it never counts as stopped then).
pub fn stops_in(lease: Option<u64>, lease_left: u64) -> u64 {
    match lease {
        Some(l) => lease_left.saturating_sub(l / STOPPED_DIVISOR),
        None => lease_left,
    }
}

/// `retry_after` when the scope has no completed call yet.
pub const UNKNOWN_MS: u64 = 1_000;

/// Each new sample moves the estimate by 1/WEIGHT of its distance.
pub const WEIGHT: u32 = 4;

/// How many completed records the PL/pgSQL variant averages.
pub const PORTABLE_SAMPLE: u32 = 32;

/// The estimated time left, in milliseconds, under the formula above. Negative inputs
/// (a clock step) count as zero.
/// `lease_ms` is the length of the lease the holder last took (None: unknown).
pub fn retry_after_ms(
    estimate_ms: Option<u64>,
    elapsed_ms: u64,
    lease_left_ms: u64,
    lease_ms: Option<u64>,
) -> u64 {
    if stopped(lease_ms, lease_left_ms) {
        return lease_left_ms;
    }
    bounded(estimate_ms, elapsed_ms, lease_left_ms, 1)
}

/// The same in microseconds (the extension's clock).
pub fn retry_after_us(
    estimate_us: Option<u64>,
    elapsed_us: u64,
    lease_left_us: u64,
    lease_us: Option<u64>,
) -> u64 {
    if stopped(lease_us, lease_left_us) {
        return lease_left_us;
    }
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
        assert_eq!(retry_after_ms(Some(1_500), 400, 60_000, None), 1_100);
        assert_eq!(retry_after_ms(Some(1_500), 1_450, 60_000, None), FLOOR_MS);
        assert_eq!(retry_after_ms(Some(1_500), 9_000, 60_000, None), FLOOR_MS);
        assert_eq!(retry_after_ms(Some(90_000), 0, 60_000, None), 60_000);
        assert_eq!(retry_after_ms(Some(1_500), 0, 20, None), 20);
        assert_eq!(retry_after_ms(None, 0, 60_000, None), UNKNOWN_MS);
        assert_eq!(retry_after_ms(None, 0, 300, None), 300);
        assert_eq!(
            retry_after_us(Some(1_500_000), 400_000, 60_000_000, None),
            1_100_000
        );
        assert_eq!(retry_after_us(None, 0, 60_000_000, None), UNKNOWN_MS * 1000);
        assert_eq!(
            retry_after_us(Some(1), 0, 60_000_000, None),
            FLOOR_MS * 1000
        );
    }

    #[test]
    fn a_holder_that_stopped_beating_is_given_the_lease_left() {
        // A 60 s lease: stopped below 20 s left, whatever the estimate says.
        let lease = Some(60_000);
        assert_eq!(retry_after_ms(Some(1_500), 9_000, 19_999, lease), 19_999);
        assert_eq!(retry_after_ms(None, 50_000, 5_000, lease), 5_000);
        // Exactly a third left is still beating: the estimate's rule.
        assert_eq!(retry_after_ms(Some(1_500), 9_000, 20_000, lease), FLOOR_MS);
        assert_eq!(retry_after_ms(Some(1_500), 9_000, 59_000, lease), FLOOR_MS);
        // Unknown length (a claim before 0.9.0): today's rule.
        assert_eq!(retry_after_ms(Some(1_500), 9_000, 5_000, None), FLOOR_MS);
        assert_eq!(
            retry_after_us(Some(1), 0, 1_000_000, Some(60_000_000)),
            1_000_000
        );
    }

    #[test]
    fn a_holder_beating_on_time_never_counts_as_stopped() {
        // The heartbeat renews every lease/3 (client/src/lease.rs): between two renewals
        // the lease left falls from `lease` to `lease - lease/3`, never below; a renewal
        // may be late by up to a whole further period before the holder counts as stopped.
        for lease in [3_u64, 100, 1_000, 30_000, 60_000, 3_600_000, 59_999_999] {
            let period = lease / 3;
            for late in [0, period / 2, period.saturating_sub(1)] {
                let left = lease - period - late;
                assert!(!stopped(Some(lease), left), "lease {lease}, late {late}");
            }
            assert!(stopped(Some(lease), lease - 2 * period - 1 - lease % 3));
            assert_eq!(stops_in(Some(lease), lease), lease - period);
            assert_eq!(stops_in(Some(lease), 0), 0);
        }
        assert!(!stopped(None, 0));
        assert_eq!(stops_in(None, 500), 500);
    }

    #[test]
    fn the_estimate_moves_a_quarter_of_the_way() {
        assert_eq!(next_estimate(None, 800), 800);
        assert_eq!(next_estimate(Some(800), 1_600), 1_000);
        assert_eq!(next_estimate(Some(1_000), 200), 800);
    }
}
