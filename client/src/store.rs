//! The store interface every backend implements with the semantics of the SQL API.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;
use crate::types::{Begin, BeginOptions, Completed, Record};

/// Where calls are remembered. Keys are explicit here: a key strategy (such as the hash of
/// the input) is the caller's, so every store sees the same key for the same call.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims the call, or tells it is running, or returns its remembered result.
    async fn begin(&self, scope: &str, key: &str, options: &BeginOptions) -> Result<Begin>;

    /// Records the result of a claimed call; `cache_failure` None follows the policy.
    async fn complete(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        response: Option<&Value>,
        succeeded: bool,
        cache_failure: Option<bool>,
    ) -> Result<Completed>;

    /// Gives a claim up without a result.
    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()>;

    /// Extends a running claim's lease; returns its new end.
    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime>;

    /// The record of a call until it expires.
    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>>;

    /// Removes expired records; returns how many.
    async fn purge(&self) -> Result<u64>;

    /// Whether what the store remembers survives a crash and is shared between processes.
    fn durable(&self) -> bool {
        true
    }
}
