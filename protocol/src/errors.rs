//! The SQLSTATEs of the SQL API: stable, documented in docs/errors.md, raised by both
//! backends and mapped to error kinds by the client.

/// One kind of error the SQL API raises on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A blank or over-long key or scope, a bad duration, a lease above the ttl, an unknown
    /// policy word.
    InvalidArgument,
    /// The key was used before with a different request.
    Mismatch,
    /// `on_cache_hit = 'fail_fast'` and the call was already made.
    RepeatRefused,
    /// The fence is not (or no longer) the record's holder.
    LeaseLost,
    /// The response is larger than `pg_idempotency.max_response_bytes`.
    ResponseTooLarge,
    /// A request without a canonical form (nested too deep).
    Uncanonicalizable,
    /// Other sessions kept changing the record while this call tried to settle it.
    Contention,
    /// The call named another role's records without the privileges of idempotency_admin.
    NotPermitted,
    /// The call was made as a grant role (idempotency_user, idempotency_admin): every role
    /// granted it may become it with SET ROLE, so its records would be all of theirs.
    GrantRoleCaller,
}

impl ErrorCode {
    /// Every code, for tables and tests.
    pub const ALL: [ErrorCode; 9] = [
        ErrorCode::InvalidArgument,
        ErrorCode::Mismatch,
        ErrorCode::RepeatRefused,
        ErrorCode::LeaseLost,
        ErrorCode::ResponseTooLarge,
        ErrorCode::Uncanonicalizable,
        ErrorCode::Contention,
        ErrorCode::NotPermitted,
        ErrorCode::GrantRoleCaller,
    ];

    /// The five-character SQLSTATE. Our own codes live in class `IK`; the others are
    /// PostgreSQL's, used with their standard meaning.
    pub const fn sqlstate(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "22023",
            ErrorCode::Mismatch => "IK001",
            ErrorCode::RepeatRefused => "IK002",
            ErrorCode::LeaseLost => "IK003",
            ErrorCode::ResponseTooLarge => "IK004",
            ErrorCode::Uncanonicalizable => "IK005",
            ErrorCode::Contention => "40001",
            ErrorCode::NotPermitted => "42501",
            ErrorCode::GrantRoleCaller => "IK006",
        }
    }

    /// The code of a SQLSTATE the SQL API raises, if it is one.
    pub fn from_sqlstate(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.sqlstate() == code)
    }
}

/// SQLSTATEs that mean the API is not where the caller looks (no such function, schema or
/// table): the extension or the portable SQL is not installed, or not this version; or
/// that it is there but not ready (55000: a schema older than the extension's library
/// serves, awaiting `ALTER EXTENSION pg_idempotency UPDATE`; a portable install without
/// its limits row).
pub const NOT_INSTALLED: [&str; 4] = ["42883", "3F000", "42P01", "55000"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sqlstate_maps_back_to_its_code() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_sqlstate(code.sqlstate()), Some(code));
            assert_eq!(code.sqlstate().len(), 5);
        }
        assert_eq!(ErrorCode::from_sqlstate("XX000"), None);
    }
}
