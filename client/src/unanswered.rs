//! The claim tokens of `begin` calls whose answer never arrived (the connection failed after
//! the request was sent), so that the next call of the same key in this process repeats that
//! attempt: if the server had claimed it, the repeat gets that claim back at once instead of
//! `InProgress` until the lease lapses.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// A token is useful only while the claim it made may still hold: longer than any lease a
/// caller would wait out.
const KEEP_FOR: Duration = Duration::from_secs(3600);
/// A bound on what is remembered when many calls fail and are never retried.
const MAX_REMEMBERED: usize = 4096;

#[derive(Default)]
pub(crate) struct Unanswered {
    tokens: Mutex<HashMap<(String, String), (Uuid, Instant)>>,
}

impl Unanswered {
    /// The token for a call of (scope, key): the unanswered attempt's, once, else a new one.
    pub(crate) fn token_for(&self, scope: &str, key: &str) -> Uuid {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        match tokens.remove(&(scope.to_string(), key.to_string())) {
            Some((token, at)) if at.elapsed() < KEEP_FOR => token,
            _ => Uuid::new_v4(),
        }
    }

    /// Remembers that the attempt with `token` got no answer.
    pub(crate) fn remember(&self, scope: &str, key: &str, token: Uuid) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        if tokens.len() >= MAX_REMEMBERED {
            tokens.retain(|_, (_, at)| at.elapsed() < KEEP_FOR);
            if tokens.len() >= MAX_REMEMBERED {
                tokens.clear();
            }
        }
        tokens.insert(
            (scope.to_string(), key.to_string()),
            (token, Instant::now()),
        );
    }
}
