//! Retries with exponential backoff and jitter: "retry + idempotent = safe". A call that is
//! in progress elsewhere, or failed transiently, is tried again; a mismatch, a refused
//! repeat or an invalid argument never is.

use std::future::Future;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all, the first included. An answer that the call is running elsewhere
    /// (`Attempt::Again`) does not use one up: those are bounded by `wait_running`.
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
    /// How long in all a call that is running elsewhere is waited for, asking again after
    /// each of the store's `retry_after` (at most `max`). The store never advises past the
    /// holder's lease, so a call whose attempt timed out or crashed is taken over within
    /// it: the default (two minutes) outlasts the default lease (one minute).
    pub wait_running: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_secs(5),
            wait_running: Duration::from_secs(120),
        }
    }
}

/// What a retried attempt tells the loop.
pub enum Attempt<T> {
    Done(T),
    /// Not done yet (in progress elsewhere): try again, not before `after` if given.
    Again {
        after: Option<Duration>,
    },
}

/// Whether an error is worth another attempt.
pub fn transient(e: &Error) -> bool {
    match e.kind {
        ErrorKind::Contention | ErrorKind::Pool | ErrorKind::Timeout | ErrorKind::Database => true,
        // A tool's failure is retried only when the tool says another attempt may succeed.
        ErrorKind::ToolFailed | ErrorKind::Http => e.retryable(),
        _ => false,
    }
}

fn jitter(d: Duration, seed: u64) -> Duration {
    // A cheap xorshift: spreading retries needs no cryptographic randomness.
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    d.mul_f64(0.5 + (x % 1000) as f64 / 2000.0)
}

impl Retry {
    /// Runs `f` until it is done, fails for good, or runs out of attempts.
    pub async fn run<T, F, Fut>(&self, mut f: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<T>>>,
    {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut last = None;
        let (mut n, mut waited) = (0u32, Duration::ZERO);
        while n < self.attempts.max(1) {
            let backoff = jitter(
                self.base.saturating_mul(1 << n.min(16)).min(self.max),
                seed.wrapping_add(n as u64),
            );
            match f().await {
                Ok(Attempt::Done(v)) => return Ok(v),
                Ok(Attempt::Again { after }) => {
                    last = None;
                    let nap = after.map_or(backoff, |a| a.min(self.max));
                    if waited + nap > self.wait_running {
                        break;
                    }
                    waited += nap;
                    tokio::time::sleep(nap).await;
                }
                Err(e) if transient(&e) => {
                    n += 1;
                    tracing::debug!(attempt = n, error = %e, "retrying");
                    // A provider that says when to come back (Retry-After) is believed, up
                    // to `max`, as the store is when it answers in_progress.
                    let wait = e.retry_after().map_or(backoff, |a| a.min(self.max));
                    last = Some(e);
                    if n < self.attempts {
                        tokio::time::sleep(wait).await;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            Error::new(
                ErrorKind::InProgress,
                "the call was still in progress after every attempt",
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// How many times `Retry::run` calls an attempt that always fails with `kind`.
    async fn attempts_for(kind: ErrorKind) -> u32 {
        let calls = AtomicU32::new(0);
        let retry = Retry {
            attempts: 4,
            base: Duration::from_millis(1),
            max: Duration::from_millis(2),
            ..Retry::default()
        };
        let got: Result<()> = retry
            .run(|| {
                calls.fetch_add(1, Ordering::SeqCst);
                async move { Err(Error::new(kind, "refused")) }
            })
            .await;
        assert_eq!(got.unwrap_err().kind, kind);
        calls.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_mismatch_a_refused_repeat_or_a_bad_argument_is_never_retried() {
        for kind in [
            ErrorKind::Mismatch,
            ErrorKind::RepeatRefused,
            ErrorKind::InvalidArgument,
            ErrorKind::LeaseLost,
        ] {
            assert_eq!(attempts_for(kind).await, 1, "{kind:?}");
        }
    }

    /// A call running elsewhere is asked about again after each retry_after for as long as
    /// `wait_running` allows, whatever `attempts` says: a timed-out attempt's claim is
    /// taken over once its lease lapses.
    #[tokio::test(start_paused = true)]
    async fn a_running_call_is_waited_for_up_to_wait_running() {
        let asked = AtomicU32::new(0);
        let retry = Retry {
            attempts: 2,
            base: Duration::from_millis(10),
            max: Duration::from_secs(1),
            wait_running: Duration::from_secs(30),
        };
        let started = tokio::time::Instant::now();
        let got = retry
            .run(|| {
                let n = asked.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok(if n < 20 {
                        Attempt::Again {
                            after: Some(Duration::from_secs(1)),
                        }
                    } else {
                        Attempt::Done(n)
                    })
                }
            })
            .await
            .unwrap();
        assert_eq!(got, 20);
        assert_eq!(started.elapsed(), Duration::from_secs(20));
        // Past wait_running, it gives up as in progress.
        asked.store(0, Ordering::SeqCst);
        let retry = Retry {
            wait_running: Duration::from_secs(5),
            ..retry
        };
        let e = retry
            .run(|| {
                asked.fetch_add(1, Ordering::SeqCst);
                async {
                    Ok(Attempt::<u32>::Again {
                        after: Some(Duration::from_secs(1)),
                    })
                }
            })
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InProgress);
        assert_eq!(asked.load(Ordering::SeqCst), 6);
    }

    #[tokio::test]
    async fn contention_is_retried_to_the_last_attempt() {
        assert_eq!(attempts_for(ErrorKind::Contention).await, 4);
    }

    /// How long (on tokio's paused clock, so exactly) `Retry::run` waits between the first
    /// and the second attempt when the first fails with a retryable Http error that says
    /// `retry_after`.
    async fn wait_after(retry_after: Option<Duration>, max: Duration) -> Duration {
        let retry = Retry {
            attempts: 2,
            base: Duration::from_millis(10),
            max,
            ..Retry::default()
        };
        let mut times = Vec::new();
        let _: Result<()> = retry
            .run(|| {
                times.push(tokio::time::Instant::now());
                async move {
                    Err(Error::new(ErrorKind::Http, "503 Service Unavailable")
                        .with_retryable(true)
                        .with_retry_after(retry_after))
                }
            })
            .await;
        assert_eq!(times.len(), 2);
        times[1] - times[0]
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_replaces_the_backoff_up_to_max() {
        let max = Duration::from_secs(5);
        assert_eq!(
            wait_after(Some(Duration::from_secs(3)), max).await,
            Duration::from_secs(3)
        );
        assert_eq!(wait_after(Some(Duration::from_secs(60)), max).await, max);
        // Without one, the jittered backoff: half to all of `base` on the first retry.
        let own = wait_after(None, max).await;
        assert!(
            own >= Duration::from_millis(5) && own <= Duration::from_millis(10),
            "{own:?}"
        );
    }
}
