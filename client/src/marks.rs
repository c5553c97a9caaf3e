//! The responses the client records in place of a result it cannot or must not keep, so
//! that every retry is told what happened instead of running the call again. Records are
//! shared across languages: docs/client.md names these objects for readers in SQL.

use serde_json::{json, Value};

/// The member that marks a response as the client's own note rather than a tool's result.
pub const MARK: &str = "pg_idempotency";

/// Why a record holds a mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// The tool ran (its effect happened) but its result could not be stored (too large,
    /// or holding U+0000): `{"pg_idempotency": {"unrecorded": <reason>}}`.
    Unrecorded(String),
    /// A takeover found that an earlier attempt may have performed the effect, and the
    /// tool's choice was to refuse: `{"pg_idempotency": {"outcome_unknown": <why>}}`.
    OutcomeUnknown(String),
}

impl Mark {
    pub fn to_response(&self) -> Value {
        match self {
            Mark::Unrecorded(why) => json!({ MARK: {"unrecorded": why} }),
            Mark::OutcomeUnknown(why) => json!({ MARK: {"outcome_unknown": why} }),
        }
    }

    /// The mark a stored response holds, if it is one.
    pub fn of(response: Option<&Value>) -> Option<Mark> {
        let obj = response?.as_object()?;
        if obj.len() != 1 {
            return None;
        }
        let inner = obj.get(MARK)?.as_object()?;
        if let Some(why) = inner.get("unrecorded").and_then(Value::as_str) {
            return Some(Mark::Unrecorded(why.to_string()));
        }
        inner
            .get("outcome_unknown")
            .and_then(Value::as_str)
            .map(|why| Mark::OutcomeUnknown(why.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_and_a_result_is_no_mark() {
        for m in [
            Mark::Unrecorded("too large".into()),
            Mark::OutcomeUnknown("taken over".into()),
        ] {
            assert_eq!(Mark::of(Some(&m.to_response())), Some(m));
        }
        for v in [
            json!({"pg_idempotency": {"other": "x"}}),
            json!({"pg_idempotency": {"unrecorded": "x"}, "id": 1}),
            json!({"email_id": 1}),
            json!("pg_idempotency"),
        ] {
            assert_eq!(Mark::of(Some(&v)), None, "{v}");
        }
        assert_eq!(Mark::of(None), None);
    }
}
