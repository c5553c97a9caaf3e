//! The same operations as run.rs's `begin` and `complete`, made through the Rust client
//! (`PgStore`) instead of plain SQL, so that a scenario checks what a service using the
//! crate sees: the client's own mapping of answers and errors is part of what is tested.

use std::time::Duration;

use pg_idempotency_client::{Begin, BeginOptions, Completed, IdempotencyStore, PgStore};
use serde_json::Value;
use tokio_postgres::Client;

use crate::history::Outcome;
use crate::run::Workload;

/// A workload interval (`300 milliseconds`, `30 seconds`, `1 hour`) as a duration.
pub fn duration(interval: &str) -> Duration {
    let (n, unit) = interval
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("interval {interval:?}: a number and a unit"));
    let n: u64 = n
        .parse()
        .unwrap_or_else(|e| panic!("interval {interval:?}: {e}"));
    let unit = unit.trim_end_matches('s');
    match unit {
        "millisecond" => Duration::from_millis(n),
        "second" => Duration::from_secs(n),
        "minute" => Duration::from_secs(60 * n),
        "hour" => Duration::from_secs(3600 * n),
        _ => panic!("interval {interval:?}: unknown unit"),
    }
}

/// A client error as an outcome: a definite failure when it carries the SQLSTATE of a
/// kind the API defines, unknown otherwise (the connection broke, or the server failed in
/// a way the call cannot tell apart from one).
fn failure(e: &pg_idempotency_client::Error) -> Outcome {
    match e.kind.sqlstate() {
        Some(code) => Outcome::Failed {
            sqlstate: code.to_string(),
        },
        None => Outcome::Indeterminate {
            why: format!("{:?}: {}", e.kind, e.message),
        },
    }
}

pub async fn begin(c: &Client, w: &Workload, key: &str) -> Outcome {
    let options = BeginOptions {
        ttl: Some(duration(&w.ttl)),
        lease: Some(duration(&w.lease)),
        ..BeginOptions::default()
    };
    match PgStore::new(c).begin(&w.scope, key, &options).await {
        Ok(Begin::Claimed(claim)) => Outcome::Claimed {
            fence: claim.fence,
            attempt: claim.attempt,
            recovered: claim.recovered,
            upstream_key: claim.upstream_key,
        },
        Ok(Begin::Replay(replay)) => Outcome::Replay {
            succeeded: replay.succeeded,
            response: replay.response,
        },
        Ok(Begin::InProgress(_)) => Outcome::InProgress,
        Err(e) => failure(&e),
    }
}

pub async fn complete(
    c: &Client,
    w: &Workload,
    key: &str,
    fence: i64,
    response: &Value,
) -> Outcome {
    let store = PgStore::new(c);
    match store
        .complete(&w.scope, key, fence, Some(response), true, None)
        .await
    {
        Ok(state) => Outcome::Completed {
            state: match state {
                Completed::Succeeded => "succeeded",
                Completed::Failed => "failed",
                Completed::Absent => "absent",
            }
            .to_string(),
        },
        Err(e) => failure(&e),
    }
}
