//! A point in time as a store keeps it: the extension's microseconds since PostgreSQL's
//! epoch, `MemoryStore`'s `SystemTime`. The decisions only compare times and measure the
//! distance between two of them.

use std::time::SystemTime;

pub trait Time: Copy + Ord {
    /// Microseconds from `earlier` to `self`; zero when `earlier` is not earlier (a clock
    /// step, or a lease that lapsed).
    fn micros_since(self, earlier: Self) -> u64;
}

/// Microseconds, as the extension counts them.
impl Time for i64 {
    fn micros_since(self, earlier: i64) -> u64 {
        self.saturating_sub(earlier).max(0) as u64
    }
}

impl Time for SystemTime {
    fn micros_since(self, earlier: SystemTime) -> u64 {
        self.duration_since(earlier)
            .map_or(0, |d| d.as_micros().min(u64::MAX as u128) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_distance_backwards_is_zero() {
        assert_eq!(5_i64.micros_since(2), 3);
        assert_eq!(2_i64.micros_since(5), 0);
        assert_eq!(i64::MAX.micros_since(i64::MIN), i64::MAX as u64);
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        assert_eq!((t + Duration::from_nanos(2_500)).micros_since(t), 2);
        assert_eq!(t.micros_since(t + Duration::from_secs(1)), 0);
    }
}
