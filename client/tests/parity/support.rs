//! What the scenarios share: unwrapping a `begin`'s answer, and bounded polling.

use std::time::{Duration, SystemTime};

use pg_idempotency_client::*;
use serde_json::json;

use super::harness::Harness;

pub const KEY: &str = "k";

/// The detail of a holder's call on a key that has no live record.
pub const ABSENT: &str =
    "The key has no live record: it was released, forgotten, never claimed, or it expired.";

pub fn opts() -> BeginOptions {
    BeginOptions::default()
}

pub fn claimed(b: Result<Begin>) -> Claim {
    match b {
        Ok(Begin::Claimed(c)) => c,
        other => panic!("expected a claim, got {other:?}"),
    }
}

pub fn replayed(b: Result<Begin>) -> Replay {
    match b {
        Ok(Begin::Replay(r)) => r,
        other => panic!("expected a replay, got {other:?}"),
    }
}

pub fn running(b: Result<Begin>) -> InProgress {
    match b {
        Ok(Begin::InProgress(p)) => p,
        other => panic!("expected in_progress, got {other:?}"),
    }
}

pub fn refused<T: std::fmt::Debug>(r: Result<T>, kind: ErrorKind) -> Error {
    match r {
        Err(e) if e.kind == kind => e,
        other => panic!("expected a {kind:?} error, got {other:?}"),
    }
}

/// A holder whose record is gone (released, forgotten, expired): its complete, extend and
/// release are each refused as lease lost, saying that the key has no live record.
pub async fn holder_finds_no_record(h: &Harness, scope: &str, key: &str, fence: i64) {
    for e in [
        refused(
            h.complete(scope, key, fence, Some(&json!({})), true, None)
                .await,
            ErrorKind::LeaseLost,
        ),
        refused(
            h.extend(scope, key, fence, None).await,
            ErrorKind::LeaseLost,
        ),
        refused(h.release(scope, key, fence).await, ErrorKind::LeaseLost),
    ] {
        assert!(e.detail().is_some_and(|d| d.starts_with(ABSENT)), "{e:?}");
        assert!(e.hint().is_some_and(|h| !h.is_empty()), "{e:?}");
    }
}

/// `a - b`, which must not be negative.
pub fn between(b: SystemTime, a: SystemTime) -> Duration {
    a.duration_since(b)
        .unwrap_or_else(|_| panic!("{a:?} is before {b:?}"))
}

/// Asserts that `t` is `d` from now, give or take `slack` (store clocks are this machine's).
pub fn assert_in(t: SystemTime, d: Duration, slack: Duration) {
    let now = SystemTime::now();
    assert!(
        t + slack >= now + d && t <= now + d + slack,
        "{t:?} is not {d:?} from {now:?} (slack {slack:?})"
    );
}

pub use pg_idempotency_tests::Deadline;
