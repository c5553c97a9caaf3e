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
            if s.contains('\0') {
                return Err(CanonError::Nul);
            }
            write_string(s, out);
        }
        Value::Array(items) => {
            if depth + 1 > MAX_DEPTH {
                return Err(CanonError::TooDeep);
            }
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
            if depth + 1 > MAX_DEPTH {
                return Err(CanonError::TooDeep);
            }
            let mut members = Vec::with_capacity(map.len());
            for (k, v) in map {
                if k.contains('\0') {
                    return Err(CanonError::Nul);
                }
                let mut s = String::new();
                write_value(v, &mut s, depth + 1)?;
                members.push((k.clone(), s));
            }
            write_object(members, out);
        }
    }
    Ok(())
}
