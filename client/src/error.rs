//! One error type, with a kind per SQLSTATE of the SQL API (pg_idempotency_protocol::ErrorCode, the table in
//! docs/errors.md) plus the client's own kinds.

use std::fmt;

use pg_idempotency_protocol::ErrorCode;

/// More kinds may come in a later release: a `match` on it needs a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// 22023: a blank or over-long key or scope, a bad duration, an unknown policy word;
    /// and, refused by every store before it sends anything, NUL in a key or scope or
    /// U+0000 in a response (neither can be stored).
    InvalidArgument,
    /// IK001: the key was used before with a different request.
    Mismatch,
    /// IK002: `on_cache_hit = fail_fast` and the call was already made.
    RepeatRefused,
    /// IK003: the fence no longer holds the record.
    LeaseLost,
    /// IK004: the response is larger than the server allows.
    ResponseTooLarge,
    /// IK005: the request has no canonical form (nested too deep, U+0000); every store
    /// refuses such a request before it sends anything.
    Uncanonicalizable,
    /// 40001: the record kept changing, or a serialization failure: retry.
    Contention,
    /// 42501: the role may not do this: it named another role's records without
    /// `idempotency_admin`, or it lacks `idempotency_user` (EXECUTE) altogether.
    NotPermitted,
    /// IK006: the call was made as a grant role (`SET ROLE idempotency_user` or
    /// `idempotency_admin`), which owns no records: connect as the application's own role
    /// (the error's hint says how to grant it).
    GrantRoleCaller,
    /// The extension (or the portable SQL) is not installed where the store looks, or not
    /// ready: 55000, a schema older than the extension's library serves (run `ALTER
    /// EXTENSION pg_idempotency UPDATE`), or a portable install without its limits row.
    NotInstalled,
    /// Getting a connection from the pool failed.
    Pool,
    /// Any other database error.
    Database,
    /// The store call (with the tool's work) took longer than its timeout.
    Timeout,
    /// The tool failed (now, or in the remembered attempt that is replayed).
    ToolFailed,
    /// A web action's request failed, or its provider answered with an error status.
    Http,
    /// A value could not be encoded or decoded (a stored record, a store's answer).
    Serialization,
    /// No tool of that name is registered.
    UnknownTool,
    /// The call was still running elsewhere after every retry.
    InProgress,
    /// The tool ran (its effect happened) but its result is not recorded: the store could
    /// not keep it (too large, U+0000) or could not be reached in time. `Error::response`
    /// carries the result where this attempt has it; a replay of a call whose result could
    /// not be kept says so too, without it.
    Unrecorded,
    /// A takeover found that an earlier attempt may have performed the effect, and the
    /// tool's choice (`OnUnknownOutcome::Refuse`, or a reconcile read that could not tell)
    /// is to refuse: every retry gets this until an operator forgets the record.
    OutcomeUnknown,
}

impl From<ErrorCode> for ErrorKind {
    fn from(code: ErrorCode) -> ErrorKind {
        match code {
            ErrorCode::InvalidArgument => ErrorKind::InvalidArgument,
            ErrorCode::Mismatch => ErrorKind::Mismatch,
            ErrorCode::RepeatRefused => ErrorKind::RepeatRefused,
            ErrorCode::LeaseLost => ErrorKind::LeaseLost,
            ErrorCode::ResponseTooLarge => ErrorKind::ResponseTooLarge,
            ErrorCode::Uncanonicalizable => ErrorKind::Uncanonicalizable,
            ErrorCode::Contention => ErrorKind::Contention,
            ErrorCode::NotPermitted => ErrorKind::NotPermitted,
            ErrorCode::GrantRoleCaller => ErrorKind::GrantRoleCaller,
        }
    }
}

impl ErrorKind {
    /// The kind of a SQLSTATE, for the codes the SQL API raises.
    pub fn from_sqlstate(code: &str) -> ErrorKind {
        match ErrorCode::from_sqlstate(code) {
            Some(c) => c.into(),
            None if pg_idempotency_protocol::errors::NOT_INSTALLED.contains(&code) => {
                ErrorKind::NotInstalled
            }
            None => ErrorKind::Database,
        }
    }

    /// The protocol's code for this kind, where the SQL API has one.
    pub fn code(self) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|c| ErrorKind::from(*c) == self)
    }

    /// The SQLSTATE the SQL API uses for this kind, where it has one.
    pub fn sqlstate(self) -> Option<&'static str> {
        self.code().map(ErrorCode::sqlstate)
    }
}

/// An error of a store call: its kind, what happened, and the underlying cause if any.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    // Kept behind a box so that a `Result` stays small on the success path.
    extra: Box<Extra>,
}

#[derive(Debug, Default)]
struct Extra {
    detail: Option<String>,
    hint: Option<String>,
    response: Option<serde_json::Value>,
    retryable: bool,
    retry_after: Option<std::time::Duration>,
    outcome_unknown: bool,
    replayed: bool,
    partition: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            extra: Box::default(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.extra.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Error {
        self.extra.hint = Some(hint.into());
        self
    }

    /// For `ToolFailed`: what the tool reported (also what is cached and replayed).
    pub fn with_response(mut self, response: Option<serde_json::Value>) -> Error {
        self.extra.response = response;
        self
    }

    /// For `ToolFailed`: whether another attempt may succeed.
    pub fn with_retryable(mut self, retryable: bool) -> Error {
        self.extra.retryable = retryable;
        self
    }

    /// For `ToolFailed` and `Http`: when another attempt is worth making, if the tool
    /// was told (a provider's `Retry-After`).
    pub fn with_retry_after(mut self, after: Option<std::time::Duration>) -> Error {
        self.extra.retry_after = after;
        self
    }

    fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.extra.source = Some(Box::new(source));
        self
    }

    pub fn detail(&self) -> Option<&str> {
        self.extra.detail.as_deref()
    }

    pub fn hint(&self) -> Option<&str> {
        self.extra.hint.as_deref()
    }

    pub fn response(&self) -> Option<&serde_json::Value> {
        self.extra.response.as_ref()
    }

    pub fn retryable(&self) -> bool {
        self.extra.retryable
    }

    /// When another attempt is worth making, if the tool was told: an upstream's
    /// `Retry-After` on a 503, a 429 or a keyed 409. `Retry` waits that long (at most its
    /// `max`) instead of its own backoff.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.extra.retry_after
    }

    /// The connection failed while the call was in flight: the store may have done it (a
    /// claim, a completion) without the answer arriving. Repeat it to learn which: a
    /// completion with its fence, a `begin` with the same claim token.
    pub fn outcome_unknown(&self) -> bool {
        self.extra.outcome_unknown
    }

    /// Through a PL/Proxy proxy (sql/proxy/): the partition that answered, or that could
    /// not be reached, by the database name PL/Proxy names it with.
    pub fn partition(&self) -> Option<&str> {
        self.extra.partition.as_deref()
    }

    /// This call did not run the tool: a failure the store remembered from an earlier run
    /// (`cache_failures`), replayed, whose kind and response are the first run's; or a
    /// result a live holder in this process ran and has not recorded yet (`Unrecorded`),
    /// handed to a call that joined it.
    pub fn replayed(&self) -> bool {
        self.extra.replayed
    }

    pub(crate) fn with_replayed(mut self) -> Error {
        self.extra.replayed = true;
        self
    }

    pub(crate) fn with_outcome_unknown(mut self, unknown: bool) -> Error {
        self.extra.outcome_unknown = unknown;
        self
    }
}

/// A tokio-postgres error that is the connection's, not the server's answer: the request may
/// have been carried out.
fn lost_connection(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    e.as_db_error().is_none()
        && (e.is_closed() || e.source().is_some_and(|s| s.is::<std::io::Error>()))
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(d) = &self.extra.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.extra
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        let err = match e.as_db_error() {
            Some(db) => {
                let kind = ErrorKind::from_sqlstate(db.code().code());
                let mut err = Error::new(kind, db.message());
                err.extra.detail = db.detail().map(str::to_string);
                err.extra.hint = db.hint().map(str::to_string);
                // A PANIC (the server crashes: a full WAL volume) or a FATAL (the session
                // ends) may come after the call's own commit reached the disk: the answer is
                // an error, the outcome unknown.
                err.extra.outcome_unknown = matches!(db.severity(), "PANIC" | "FATAL");
                match crate::plproxy::parse(db.message()) {
                    Some(crate::plproxy::Proxied::Remote { partition, message }) => {
                        err.message = message.to_string();
                        err.extra.detail = db
                            .detail()
                            .map(|d| crate::plproxy::unlabelled(d, "Remote detail: ").to_string());
                        err.extra.hint = db
                            .hint()
                            .map(|h| crate::plproxy::unlabelled(h, "Remote hint: ").to_string());
                        err.extra.partition = Some(partition.to_string());
                    }
                    Some(crate::plproxy::Proxied::Transport {
                        partition,
                        message,
                        connect,
                    }) => {
                        err.message = format!("partition {partition} of the proxy: {message}");
                        err.extra.partition = Some(partition.to_string());
                        // Lost with the call in flight: the partition may have done it.
                        err.extra.outcome_unknown = !connect;
                        if err.extra.hint.is_none() {
                            err.extra.hint = Some(
                                "The PL/Proxy proxy could not reach this partition: the calls whose keys live on it fail until it is back; retry then.".into(),
                            );
                        }
                    }
                    None => {}
                }
                err
            }
            None => Error::new(ErrorKind::Database, e.to_string())
                .with_outcome_unknown(lost_connection(&e)),
        };
        err.with_source(e)
    }
}

impl From<pg_idempotency_canon::CanonError> for Error {
    fn from(e: pg_idempotency_canon::CanonError) -> Error {
        // In the SQL API's words (IK005), where the server has the same case.
        let hint = match e {
            pg_idempotency_canon::CanonError::TooDeep => format!(
                "Requests are hashed in canonical JSON, which allows at most {} levels of nesting.",
                pg_idempotency_canon::MAX_DEPTH
            ),
            pg_idempotency_canon::CanonError::Nul => {
                "Encode such data (base64, for example) or leave the U+0000 out of the request."
                    .to_string()
            }
            _ => "Pass a request that is valid JSON.".to_string(),
        };
        Error::new(
            ErrorKind::Uncanonicalizable,
            "request has no canonical form",
        )
        .with_detail(format!("{e}."))
        .with_hint(hint)
        .with_source(e)
    }
}

/// A refusal of the state machine (mismatch, refused repeat, lost lease), in the words
/// protocol/src/refusal.rs gives every store.
impl From<pg_idempotency_protocol::refusal::Refusal> for Error {
    fn from(r: pg_idempotency_protocol::refusal::Refusal) -> Error {
        Error::new(r.code.into(), r.message)
            .with_detail(r.detail)
            .with_hint(r.hint)
    }
}

#[cfg(feature = "deadpool")]
impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Error {
        match e {
            deadpool_postgres::PoolError::Backend(db) => Error::from(db),
            other => Error::new(ErrorKind::Pool, "no connection from the pool").with_source(other),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
