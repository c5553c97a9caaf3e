//! A store that keeps the text of everything it is told (keys, requests, responses) and
//! hands the calls to the store under test: to show what never reaches a store.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use pg_idempotency_client::*;
use serde_json::Value;

use super::stores::Store;

pub struct Told {
    inner: Store,
    heard: Mutex<Vec<String>>,
}

impl Told {
    pub fn over(inner: Store) -> Arc<Told> {
        Arc::new(Told {
            inner,
            heard: Mutex::default(),
        })
    }

    /// Everything told so far, one text.
    pub fn heard(&self) -> String {
        self.heard.lock().unwrap().join("\n")
    }

    fn hear(&self, what: String) {
        self.heard.lock().unwrap().push(what);
    }
}

#[async_trait]
impl IdempotencyStore for Told {
    // Defaults kept (a test double: the batch calls go item by item through its own begin and
    // complete, and what these tests do not use answers as the trait says): begin_batch,
    // complete_batch, forget, metrics, identity, joins_live_holders, admit_joined_wait,
    // api_schema, statement_mode.
    async fn begin(&self, scope: &str, key: &str, options: &BeginOptions) -> Result<Begin> {
        self.hear(format!("begin {scope} {key} {options:?}"));
        self.inner.begin(scope, key, options).await
    }
    async fn complete(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        response: Option<&Value>,
        succeeded: bool,
        cache_failure: Option<bool>,
    ) -> Result<Completed> {
        self.hear(format!("complete {scope} {key} {response:?}"));
        self.inner
            .complete(scope, key, fence, response, succeeded, cache_failure)
            .await
    }
    async fn release(&self, scope: &str, key: &str, fence: i64) -> Result<()> {
        self.inner.release(scope, key, fence).await
    }
    async fn extend(
        &self,
        scope: &str,
        key: &str,
        fence: i64,
        lease: Option<Duration>,
    ) -> Result<SystemTime> {
        self.inner.extend(scope, key, fence, lease).await
    }
    async fn lookup(&self, scope: &str, key: &str) -> Result<Option<Record>> {
        self.inner.lookup(scope, key).await
    }
    async fn purge(&self) -> Result<u64> {
        self.inner.purge().await
    }
    fn durable(&self) -> bool {
        self.inner.durable()
    }
}
