//! One error type, with a kind per SQLSTATE of the SQL API (the README's error table) plus
//! the client's own kinds.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 22023: a blank or over-long key or scope, a bad duration, an unknown policy word.
    InvalidArgument,
    /// IK001: the key was used before with a different request.
    Mismatch,
    /// IK002: `on_cache_hit = fail_fast` and the call was already made.
    RepeatRefused,
    /// IK003: the fence no longer holds the record.
    LeaseLost,
    /// IK004: the response is larger than the server allows.
    ResponseTooLarge,
    /// IK005: the request has no canonical form (nested too deep, U+0000).
    Uncanonicalizable,
    /// 40001: the record kept changing, or a serialization failure: retry.
    Contention,
    /// The extension (or the portable SQL) is not installed where the store looks.
    NotInstalled,
    /// Getting a connection from the pool failed.
    Pool,
    /// Any other database error.
    Database,
    /// The store call (with the tool's work) took longer than its timeout.
    Timeout,
    /// The tool failed (now, or in the remembered attempt that is replayed).
    ToolFailed,
    /// No tool of that name is registered.
    UnknownTool,
    /// The call was still running elsewhere after every retry.
    InProgress,
}

impl ErrorKind {
    /// The kind of a SQLSTATE, for the codes the SQL API raises.
    pub fn from_sqlstate(code: &str) -> ErrorKind {
        match code {
            "22023" => ErrorKind::InvalidArgument,
            "IK001" => ErrorKind::Mismatch,
            "IK002" => ErrorKind::RepeatRefused,
            "IK003" => ErrorKind::LeaseLost,
            "IK004" => ErrorKind::ResponseTooLarge,
            "IK005" => ErrorKind::Uncanonicalizable,
            "40001" => ErrorKind::Contention,
            "42883" | "3F000" | "42P01" => ErrorKind::NotInstalled,
            _ => ErrorKind::Database,
        }
    }

    /// The SQLSTATE the SQL API uses for this kind, where it has one.
    pub fn sqlstate(self) -> Option<&'static str> {
        Some(match self {
            ErrorKind::InvalidArgument => "22023",
            ErrorKind::Mismatch => "IK001",
            ErrorKind::RepeatRefused => "IK002",
            ErrorKind::LeaseLost => "IK003",
            ErrorKind::ResponseTooLarge => "IK004",
            ErrorKind::Uncanonicalizable => "IK005",
            ErrorKind::Contention => "40001",
            _ => return None,
        })
    }
}

/// An error of a store call: its kind, what happened, and the underlying cause if any.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// For `ToolFailed`: what the tool reported (also what is cached and replayed).
    pub response: Option<serde_json::Value>,
    /// For `ToolFailed`: the tool said another attempt may succeed.
    pub retryable: bool,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            detail: None,
            hint: None,
            response: None,
            retryable: false,
            source: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }

    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        let (kind, message, detail, hint) = match e.as_db_error() {
            Some(db) => (
                ErrorKind::from_sqlstate(db.code().code()),
                db.message().to_string(),
                db.detail().map(str::to_string),
                db.hint().map(str::to_string),
            ),
            None => (ErrorKind::Database, e.to_string(), None, None),
        };
        Error {
            kind,
            message,
            detail,
            hint,
            response: None,
            retryable: false,
            source: Some(Box::new(e)),
        }
    }
}

impl From<canon::CanonError> for Error {
    fn from(e: canon::CanonError) -> Error {
        Error {
            kind: ErrorKind::Uncanonicalizable,
            message: "request has no canonical form".into(),
            detail: Some(e.to_string()),
            hint: None,
            response: None,
            retryable: false,
            source: Some(Box::new(e)),
        }
    }
}

#[cfg(feature = "deadpool")]
impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Error {
        match e {
            deadpool_postgres::PoolError::Backend(db) => Error::from(db),
            other => Error {
                kind: ErrorKind::Pool,
                message: other.to_string(),
                detail: None,
                hint: None,
                response: None,
                retryable: false,
                source: Some(Box::new(other)),
            },
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
