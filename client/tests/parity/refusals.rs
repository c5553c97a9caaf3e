//! Every error a store returns for the caller's own doing, one row each: how to provoke it
//! and what the SQL API answers (its kind, message and detail, from
//! tests/regress/expected/errors.out and the extension's sources). limits.rs and errors.rs
//! run this one table over every store.

use std::time::Duration;

use pg_idempotency_client::*;
use serde_json::{json, Value};

use super::harness::Harness;
use super::mismatch::mismatch_detail;
use super::support::*;

/// What a store's detail must be.
pub enum Detail {
    Exact(String),
    /// The server's detail goes on with a name only it has (idem_forget).
    StartsWith(&'static str),
}

/// What a store's hint must be.
pub enum Hint {
    /// Present and not blank (the server's names its settings and SQL functions, a local
    /// store's its calls: the words differ, the advice does not).
    Given,
}

pub struct Expected {
    pub kind: ErrorKind,
    pub message: &'static str,
    pub detail: Detail,
    pub hint: Hint,
}

fn invalid(message: &'static str, detail: impl Into<String>) -> Expected {
    Expected {
        kind: ErrorKind::InvalidArgument,
        message,
        detail: Detail::Exact(detail.into()),
        hint: Hint::Given,
    }
}

const LEASE_LOST: &str = "lease lost: this fence does not hold the record";

fn lost(detail: Detail) -> Expected {
    Expected {
        kind: ErrorKind::LeaseLost,
        message: LEASE_LOST,
        detail,
        hint: Hint::Given,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    ScopeBlank,
    ScopeWhitespace,
    ScopeTooLong,
    ScopeNul,
    KeyBlank,
    KeyTooLong,
    KeyTooLongInBytes,
    KeyNul,
    TtlZero,
    TtlTooLong,
    LeaseZero,
    LeaseTooLong,
    LeaseOverTtl,
    LeaseOverDefaultTtl,
    WaitTooLong,
    CompleteScopeBlank,
    ReleaseKeyTooLong,
    ExtendScopeTooLong,
    LookupKeyBlank,
    ExtendLeaseZero,
    ExtendLeaseOverTtl,
    ResponseNul,
    ResponseTooLarge,
    RequestTooDeep,
    Mismatch,
    RepeatOfSuccess,
    RepeatOfFailure,
    OtherFence,
    LaterFence,
    NoRecord,
    Released,
    ReleaseCompleted,
    ExtendCompleted,
}

pub const CASES: &[Case] = &[
    Case::ScopeBlank,
    Case::ScopeWhitespace,
    Case::ScopeTooLong,
    Case::ScopeNul,
    Case::KeyBlank,
    Case::KeyTooLong,
    Case::KeyTooLongInBytes,
    Case::KeyNul,
    Case::TtlZero,
    Case::TtlTooLong,
    Case::LeaseZero,
    Case::LeaseTooLong,
    Case::LeaseOverTtl,
    Case::LeaseOverDefaultTtl,
    Case::WaitTooLong,
    Case::CompleteScopeBlank,
    Case::ReleaseKeyTooLong,
    Case::ExtendScopeTooLong,
    Case::LookupKeyBlank,
    Case::ExtendLeaseZero,
    Case::ExtendLeaseOverTtl,
    Case::ResponseNul,
    Case::ResponseTooLarge,
    Case::RequestTooDeep,
    Case::Mismatch,
    Case::RepeatOfSuccess,
    Case::RepeatOfFailure,
    Case::OtherFence,
    Case::LaterFence,
    Case::NoRecord,
    Case::Released,
    Case::ReleaseCompleted,
    Case::ExtendCompleted,
];

const DAY: u64 = 24 * 3600;

fn ttl_lease(ttl: Option<u64>, lease: Option<u64>) -> BeginOptions {
    BeginOptions {
        ttl: ttl.map(Duration::from_secs),
        lease: lease.map(Duration::from_secs),
        ..opts()
    }
}

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

fn first_request() -> Value {
    json!({"amount": 1})
}

fn other_request() -> Value {
    json!({"amount": 2})
}

impl Case {
    pub fn expected(self) -> Expected {
        match self {
            Case::ScopeBlank | Case::ScopeWhitespace | Case::CompleteScopeBlank => invalid(
                "scope must not be blank",
                "The scope is empty or only whitespace.",
            ),
            Case::ScopeTooLong | Case::ExtendScopeTooLong => invalid(
                "scope is too long",
                "The scope has 129 bytes; the limit is 128.",
            ),
            Case::ScopeNul => invalid(
                "scope must not contain NUL",
                "The scope has the character U+0000 at byte 1, which PostgreSQL text cannot hold.",
            ),
            Case::KeyBlank | Case::LookupKeyBlank => {
                invalid("key must not be blank", "The key is empty or only whitespace.")
            }
            Case::KeyTooLong | Case::ReleaseKeyTooLong => {
                invalid("key is too long", "The key has 513 bytes; the limit is 512.")
            }
            Case::KeyTooLongInBytes => {
                invalid("key is too long", "The key has 514 bytes; the limit is 512.")
            }
            Case::KeyNul => invalid(
                "key must not contain NUL",
                "The key has the character U+0000 at byte 2, which PostgreSQL text cannot hold.",
            ),
            Case::TtlZero => invalid("ttl must be positive", "The ttl normalises to 0 s."),
            Case::TtlTooLong => invalid(
                "ttl is too long",
                "The ttl normalises to 2678400 s; the limit is 2592000 s.",
            ),
            Case::LeaseZero | Case::ExtendLeaseZero => {
                invalid("lease must be positive", "The lease normalises to 0 s.")
            }
            Case::LeaseTooLong => invalid(
                "lease is too long",
                "The lease normalises to 2678400 s; the limit is 2592000 s.",
            ),
            Case::LeaseOverTtl | Case::ExtendLeaseOverTtl => invalid(
                "lease must not exceed ttl",
                "The lease is 120 s and the ttl 60 s.",
            ),
            Case::LeaseOverDefaultTtl => invalid(
                "lease must not exceed ttl",
                "The lease is 7200 s and the ttl 3600 s.",
            ),
            Case::WaitTooLong => invalid(
                "wait is too long",
                "The wait normalises to 8640000 s; the limit is 2592000 s.",
            ),
            Case::ResponseNul => invalid(
                "response must not contain U+0000",
                "A string or member name of the response has the character U+0000, which jsonb cannot hold.",
            ),
            // The server counts jsonb bytes, a local store JSON text: the numbers differ.
            Case::ResponseTooLarge => Expected {
                kind: ErrorKind::ResponseTooLarge,
                message: "response is too large",
                detail: Detail::StartsWith("The response takes "),
                hint: Hint::Given,
            },
            Case::RequestTooDeep => Expected {
                kind: ErrorKind::Uncanonicalizable,
                message: "request has no canonical form",
                detail: Detail::StartsWith(""),
                hint: Hint::Given,
            },
            Case::Mismatch => Expected {
                kind: ErrorKind::Mismatch,
                message: "idempotency key reused with a different request",
                detail: Detail::Exact(mismatch_detail(&first_request(), &other_request())),
                hint: Hint::Given,
            },
            Case::RepeatOfSuccess | Case::RepeatOfFailure => Expected {
                kind: ErrorKind::RepeatRefused,
                message: "repeat of a completed call refused",
                detail: Detail::Exact(format!(
                    "The call {} at attempt 1; on_cache_hit is 'fail_fast'.",
                    if self == Case::RepeatOfSuccess {
                        "succeeded"
                    } else {
                        "failed"
                    }
                )),
                hint: Hint::Given,
            },
            Case::OtherFence => lost(Detail::Exact(
                "The record is held under a different fence.".into(),
            )),
            Case::LaterFence => lost(Detail::Exact(
                "The record is held under a later fence: the call was taken over or claimed again."
                    .into(),
            )),
            Case::NoRecord | Case::Released => lost(Detail::Exact(
                "The key has no live record: it was released, forgotten, never claimed, or it expired."
                    .into(),
            )),
            Case::ReleaseCompleted => lost(Detail::StartsWith("The call was already completed; ")),
            Case::ExtendCompleted => lost(Detail::Exact(
                "The call was already completed; there is no lease to extend.".into(),
            )),
        }
    }

    /// Makes the record the case needs under `(scope, KEY)`, if any, and returns its fence.
    pub async fn setup(self, h: &Harness, scope: &str) -> Option<i64> {
        let claim = |o: BeginOptions| async move { claimed(h.begin(scope, KEY, &o).await).fence };
        let fence = match self {
            Case::ExtendLeaseOverTtl => claim(ttl_lease(Some(60), None)).await,
            Case::Mismatch => {
                claim(BeginOptions {
                    request: Some(first_request()),
                    ..opts()
                })
                .await
            }
            Case::RepeatOfSuccess | Case::RepeatOfFailure => {
                let f = claim(opts()).await;
                let ok = self == Case::RepeatOfSuccess;
                h.complete(scope, KEY, f, None, ok, Some(true))
                    .await
                    .unwrap();
                f
            }
            Case::Released => {
                let f = claim(opts()).await;
                h.release(scope, KEY, f).await.unwrap();
                f
            }
            Case::ReleaseCompleted | Case::ExtendCompleted => {
                let f = claim(opts()).await;
                h.complete(scope, KEY, f, Some(&json!({})), true, None)
                    .await
                    .unwrap();
                f
            }
            Case::ResponseNul | Case::ResponseTooLarge | Case::OtherFence | Case::LaterFence => {
                claim(opts()).await
            }
            _ => return None,
        };
        Some(fence)
    }

    /// The refused call (`fence`: what setup returned).
    pub async fn provoke(self, h: &Harness, scope: &str, fence: Option<i64>) -> Result<()> {
        let f = fence.unwrap_or(1);
        let begin = |s: String, k: String, o: BeginOptions| async move {
            h.begin(&s, &k, &o).await.map(drop)
        };
        let (sc, k) = (scope.to_string(), KEY.to_string());
        let long_scope = "s".repeat(129);
        match self {
            Case::ScopeBlank => begin(String::new(), k, opts()).await,
            Case::ScopeWhitespace => begin(" \t\u{3000}".into(), k, opts()).await,
            Case::ScopeTooLong => begin(long_scope, k, opts()).await,
            Case::ScopeNul => begin("a\0b".into(), k, opts()).await,
            Case::KeyBlank => begin(sc, String::new(), opts()).await,
            Case::KeyTooLong => begin(sc, "k".repeat(513), opts()).await,
            Case::KeyTooLongInBytes => begin(sc, "é".repeat(257), opts()).await,
            Case::KeyNul => begin(sc, "ke\0y".into(), opts()).await,
            Case::TtlZero => begin(sc, k, ttl_lease(Some(0), None)).await,
            Case::TtlTooLong => begin(sc, k, ttl_lease(Some(31 * DAY), None)).await,
            Case::LeaseZero => begin(sc, k, ttl_lease(None, Some(0))).await,
            Case::LeaseTooLong => begin(sc, k, ttl_lease(None, Some(31 * DAY))).await,
            Case::LeaseOverTtl => begin(sc, k, ttl_lease(Some(60), Some(120))).await,
            Case::LeaseOverDefaultTtl => begin(sc, k, ttl_lease(None, Some(7200))).await,
            Case::WaitTooLong => {
                let o = BeginOptions {
                    wait: Duration::from_secs(100 * DAY),
                    ..opts()
                };
                begin(sc, k, o).await
            }
            Case::CompleteScopeBlank => h.complete("", KEY, f, None, true, None).await.map(drop),
            Case::ReleaseKeyTooLong => h.release(scope, &"k".repeat(513), f).await,
            Case::ExtendScopeTooLong => h.extend(&long_scope, KEY, f, None).await.map(drop),
            Case::LookupKeyBlank => h.lookup(scope, "").await.map(drop),
            // Refused before the record is read: there is none.
            Case::ExtendLeaseZero => h
                .extend(scope, KEY, f, Some(Duration::ZERO))
                .await
                .map(drop),
            Case::ExtendLeaseOverTtl => {
                let lease = Some(Duration::from_secs(120));
                h.extend(scope, KEY, f, lease).await.map(drop)
            }
            Case::ResponseNul => {
                let response = json!({"text": "a\u{0}b"});
                h.complete(scope, KEY, f, Some(&response), true, None)
                    .await
                    .map(drop)
            }
            Case::ResponseTooLarge => {
                // Twice the server's default limit, in either measure.
                let response = json!({"blob": "x".repeat(2 * 1024 * 1024)});
                h.complete(scope, KEY, f, Some(&response), true, None)
                    .await
                    .map(drop)
            }
            Case::RequestTooDeep => {
                let o = BeginOptions {
                    request: Some(nested(200)),
                    ..opts()
                };
                begin(sc, k, o).await
            }
            Case::Mismatch => {
                let o = BeginOptions {
                    request: Some(other_request()),
                    ..opts()
                };
                begin(sc, k, o).await
            }
            Case::RepeatOfSuccess | Case::RepeatOfFailure => {
                let o = BeginOptions {
                    on_cache_hit: Some(OnCacheHit::FailFast),
                    ..opts()
                };
                begin(sc, k, o).await
            }
            Case::OtherFence => h
                .complete(scope, KEY, f + 1000, Some(&json!({})), true, None)
                .await
                .map(drop),
            Case::LaterFence => h
                .complete(scope, KEY, -1, Some(&json!({})), true, None)
                .await
                .map(drop),
            Case::NoRecord | Case::Released => h
                .complete(scope, KEY, f, Some(&json!({})), true, None)
                .await
                .map(drop),
            Case::ReleaseCompleted => h.release(scope, KEY, f).await,
            Case::ExtendCompleted => h.extend(scope, KEY, f, None).await.map(drop),
        }
    }
}
