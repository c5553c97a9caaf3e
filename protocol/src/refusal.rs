//! The state machine's refusals in the SQL API's words: message, detail and hint of a
//! mismatch, a refused repeat, a lost lease (one detail per reason) and contention, said
//! once for the extension and the client's stores (`MemoryStore`, `RedisStore`), so a
//! caller reads the same error whatever the store. Where the server's hint names one of
//! its SQL functions (idem_begin, idem_lookup, idem_forget), the client's names its own
//! call (begin, lookup, forget): [`Api`]. The PL/pgSQL variant raises the same words
//! (the behaviour suite compares them; client/tests/parity/errors.rs compares the stores').

use crate::decide::{Lost, MAX_RACES};
use crate::{ErrorCode, State};

/// Who names the calls a hint points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// The SQL functions: idem_begin, idem_lookup, idem_forget.
    Sql,
    /// The client's calls: begin, lookup, forget.
    Client,
}

impl Api {
    fn begin(self) -> &'static str {
        match self {
            Api::Sql => "idem_begin",
            Api::Client => "begin",
        }
    }

    fn lookup(self) -> &'static str {
        match self {
            Api::Sql => "idem_lookup",
            Api::Client => "lookup",
        }
    }

    fn forget(self) -> &'static str {
        match self {
            Api::Sql => "idem_forget",
            Api::Client => "forget",
        }
    }
}

/// One refusal's words and its SQLSTATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: &'static str,
    pub detail: String,
    pub hint: String,
}

/// The key was used with another request (decide::Step::Mismatch).
pub fn mismatch(stored: &[u8], given: &[u8]) -> Refusal {
    Refusal {
        code: ErrorCode::Mismatch,
        message: "idempotency key reused with a different request",
        detail: format!(
            "The key was first used with a request of fingerprint \\x{}; this request's fingerprint is \\x{}.",
            hex(stored),
            hex(given)
        ),
        hint: "Use a new key for a different request, or on_mismatch => 'ignore' when only part of the request names the call.".into(),
    }
}

/// A repeat of a call that completed in `state` at `attempt`, under `fail_fast`
/// (decide::Step::RepeatRefused).
pub fn repeat_refused(state: State, attempt: i32, api: Api) -> Refusal {
    Refusal {
        code: ErrorCode::RepeatRefused,
        message: "repeat of a completed call refused",
        detail: format!(
            "The call {} at attempt {attempt}; on_cache_hit is 'fail_fast'.",
            state.as_sql()
        ),
        hint: format!(
            "Look at the stored result with {}, or use a new key to run the call again.",
            api.lookup()
        ),
    }
}

/// The fence does not hold the record (decide::held's refusal).
pub fn lease_lost(why: Lost, api: Api) -> Refusal {
    Refusal {
        code: ErrorCode::LeaseLost,
        message: "lease lost: this fence does not hold the record",
        detail: match why {
            Lost::Absent => "The key has no live record: it was released, forgotten, never claimed, or it expired.".into(),
            Lost::LaterFence => "The record is held under a later fence: the call was taken over or claimed again.".into(),
            Lost::OtherFence => "The record is held under a different fence.".into(),
            Lost::ReleaseCompleted => format!(
                "The call was already completed; {} removes a stored result.",
                api.forget()
            ),
            Lost::ExtendCompleted => "The call was already completed; there is no lease to extend.".into(),
        },
        hint: format!(
            "Another attempt took the call over, or it was completed, released or expired; do not \
             apply this attempt's result. Call {} again to learn the call's state.",
            api.begin()
        ),
    }
}

/// Other sessions changed the record `MAX_RACES` times between a call's read and its
/// write.
pub fn contention() -> Refusal {
    Refusal {
        code: ErrorCode::Contention,
        message: "could not settle the record: it kept changing",
        detail: format!("{MAX_RACES} concurrent changes to this key overtook this call."),
        hint: "Retry the call.".into(),
    }
}

/// The roles the install grants to others. Neither owns records: every role granted one
/// may `SET ROLE` to it, so a call made as it would share one key space between them all.
pub const GRANT_ROLES: [&str; 2] = ["idempotency_user", "idempotency_admin"];

/// A call that acts on records as its caller, made as a grant role (`role`, as `regrole`
/// prints it). The hint says how to grant so that each role keeps its own identity. The
/// portable variant (sql/src/helpers.sql, `_idem_owner`) and the PL/Proxy layer
/// (sql/proxy/src/routing.sql) raise the same words.
pub fn grant_role_caller(role: &str) -> Refusal {
    Refusal {
        code: ErrorCode::GrantRoleCaller,
        message: "a grant role cannot own idempotency records",
        detail: format!(
            "The call was made as {role}, which every role granted it may become with SET ROLE: \
             its records would be shared by all of them."
        ),
        hint: GRANT_ROLE_HINT.into(),
    }
}

/// How to grant idempotency_user so that each role calls as itself.
pub const GRANT_ROLE_HINT: &str = "Call as the application's own role. Grant it with \
     GRANT idempotency_user TO tenant WITH INHERIT TRUE, SET FALSE (PostgreSQL 16 and later); \
     a NOINHERIT role gets a group role of its own: CREATE ROLE tenant_calls NOLOGIN; \
     GRANT idempotency_user TO tenant_calls; GRANT tenant_calls TO tenant; then SET ROLE tenant_calls.";

/// Lower-case hex, as PostgreSQL shows a bytea (the protocol crate has no dependencies).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests;
