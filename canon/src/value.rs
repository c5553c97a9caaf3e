//! The value path: a `serde_json::Value`, as a client holds its input.

use serde_json::Value;

use crate::number::write_number;
use crate::write::{write_object, write_string};
use crate::{CanonError, MAX_DEPTH};

pub(crate) fn canonicalize(value: &Value) -> Result<String, CanonError> {
    let mut out = String::new();
    write_value(value, &mut out, 0)?;
    Ok(out)
}

fn write_value(value: &Value, out: &mut String, depth: usize) -> Result<(), CanonError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // serde_json prints i64/u64 exactly and f64 in its shortest form (or, with its
        // arbitrary_precision feature, the number as it was read): the text path's rule
        // then gives the same digits SQL computes from the JSON the client sends.
        Value::Number(n) => write_number(&n.to_string(), out),
        Value::String(s) => {
            storable(s)?;
            write_string(s, out);
        }
        Value::Array(items) => {
            nested(depth, MAX_DEPTH)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            nested(depth, MAX_DEPTH)?;
            let mut members = Vec::with_capacity(map.len());
            for (k, v) in map {
                storable(k)?;
                let mut s = String::new();
                write_value(v, &mut s, depth + 1)?;
                members.push((k.clone(), s));
            }
            write_object(members, out);
        }
    }
    Ok(())
}

/// A string or member name `jsonb` can hold: one without U+0000.
fn storable(s: &str) -> Result<(), CanonError> {
    if s.contains('\0') {
        return Err(CanonError::Nul);
    }
    Ok(())
}

/// The depth of the members of a container at `depth`, if within `limit`.
fn nested(depth: usize, limit: usize) -> Result<usize, CanonError> {
    if depth + 1 > limit {
        return Err(CanonError::TooDeep);
    }
    Ok(depth + 1)
}

/// Refuses what [`canonicalize`] refuses with a `limit` of [`MAX_DEPTH`] (U+0000, deeper
/// nesting), without writing anything: for a caller that sends the value elsewhere to be
/// canonicalized and wants the refusal first. With no limit it refuses U+0000 only, at
/// any depth: what `jsonb` cannot hold. A loop over a stack, not recursion, so an
/// unlimited walk cannot exhaust the thread's stack.
pub(crate) fn check(value: &Value, limit: usize) -> Result<(), CanonError> {
    let mut pending = vec![(value, 0)];
    while let Some((v, depth)) = pending.pop() {
        match v {
            Value::String(s) => storable(s)?,
            Value::Array(items) => {
                let inner = nested(depth, limit)?;
                pending.extend(items.iter().map(|item| (item, inner)));
            }
            Value::Object(map) => {
                let inner = nested(depth, limit)?;
                for (k, v) in map {
                    storable(k)?;
                    pending.push((v, inner));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    Ok(())
}
