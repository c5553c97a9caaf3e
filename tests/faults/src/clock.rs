//! The run's clock: every time in a history is microseconds since the run started. Apart
//! from the client tasks (run.rs) because the record monitor (monitor.rs) stamps its reads
//! on the same clock, and the tasks start the monitor.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The run's clock: microseconds since it started, and the wall clock at its start.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    pub start_epoch_micros: i64,
}

impl Clock {
    pub fn start() -> Clock {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        Clock {
            start: Instant::now(),
            start_epoch_micros: epoch,
        }
    }

    pub fn now(&self) -> i64 {
        self.start.elapsed().as_micros() as i64
    }
}
