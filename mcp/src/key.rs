//! A deduplicated call's key, in this order:
//!
//! 1. a key the MCP client put in the request's `_meta`: `pg-idempotency/key`, or
//!    `idempotencyKey` (the spelling of the MCP proposal SEP-3182);
//! 2. the `Idempotency-Key` header of the HTTP request that carried the call;
//! 3. the argument the tool's policy names (`strategy = "explicit"`, `key_field`);
//! 4. the hash of the canonical JSON of the arguments (`hash_input`).
//!
//! Never the JSON-RPC id: a retry is a new request with a new id.

use serde_json::{Map, Value};

use crate::config::Strategy;

/// The `_meta` member a client names its call's key with.
pub const META_KEY: &str = "pg-idempotency/key";
/// SEP-3182's spelling of the same.
pub const META_KEY_SEP: &str = "idempotencyKey";
pub const HEADER: &str = "idempotency-key";
/// The SQL API's limit on a key's length, in bytes.
const KEY_MAX: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Named by the client (`_meta` or header): a repeat with other arguments is refused,
    /// since the client named one call and sent two.
    Client { key: String, from: &'static str },
    /// The argument the policy names: the Java framework's EXPLICIT (a repeat with other
    /// arguments replays the first call).
    Field(String),
    /// The arguments' hash (computed by the client library from the arguments).
    HashInput,
    /// `strategy = "uuid"` and no key named: the call is not deduplicated.
    None,
}

/// Why a call's key cannot be had: the call is refused with invalid params.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRefused {
    pub message: String,
    pub hint: String,
}

pub fn choose(
    meta: &Map<String, Value>,
    header: Option<&str>,
    strategy: Strategy,
    key_field: Option<&str>,
    arguments: &Value,
) -> Result<Key, KeyRefused> {
    let ours = meta_string(meta, META_KEY)?;
    let sep = meta_string(meta, META_KEY_SEP)?;
    let from_meta = match (ours, sep) {
        (Some(a), Some(b)) if a != b => {
            return Err(KeyRefused {
                message: format!(
                    "_meta names two keys: {META_KEY} = {a:?} and {META_KEY_SEP} = {b:?}"
                ),
                hint: format!(
                    "Send one of {META_KEY} and {META_KEY_SEP}, or the same key in both."
                ),
            })
        }
        (Some(a), _) => Some((a, "_meta")),
        (None, Some(b)) => Some((b, "_meta")),
        (None, None) => None,
    };
    if let Some((key, from)) = from_meta.or(header.map(|h| (h.to_string(), "header"))) {
        check(&key, from)?;
        return Ok(Key::Client { key, from });
    }
    match strategy {
        Strategy::HashInput => Ok(Key::HashInput),
        Strategy::Uuid => Ok(Key::None),
        Strategy::Explicit => {
            let field = key_field.unwrap_or_default();
            let pointer = if field.starts_with('/') {
                field.to_string()
            } else {
                format!("/{field}")
            };
            let key = match arguments.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => {
                    return Err(KeyRefused {
                        message: format!("the call has no argument {field:?}, which names its key"),
                        hint: format!("Pass {field:?} (a string or a number), or name the call's key in _meta ({META_KEY})."),
                    })
                }
            };
            check(&key, "argument")?;
            Ok(Key::Field(key))
        }
    }
}

fn meta_string(meta: &Map<String, Value>, name: &str) -> Result<Option<String>, KeyRefused> {
    match meta.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(KeyRefused {
            message: format!("_meta.{name} is {other}, not a string"),
            hint: format!("Send the key as a string: \"_meta\": {{\"{name}\": \"...\"}}."),
        }),
    }
}

fn check(key: &str, from: &str) -> Result<(), KeyRefused> {
    if key.trim().is_empty() {
        return Err(KeyRefused {
            message: format!("the key from the {from} is blank"),
            hint: "Name every call with a non-blank key (a uuid made once per call and kept across its retries).".into(),
        });
    }
    if key.len() > KEY_MAX {
        return Err(KeyRefused {
            message: format!(
                "the key from the {from} is {} bytes long, over the {KEY_MAX} a key may have",
                key.len()
            ),
            hint: format!("Keys are 1 to {KEY_MAX} bytes of text; send a hash of a longer one (SHA-256 in hex is 64 bytes)."),
        });
    }
    if let Some(at) = key.find('\0') {
        return Err(KeyRefused {
            message: format!("the key from the {from} holds U+0000 (a NUL character) at byte {at}"),
            hint: "PostgreSQL text cannot hold U+0000: leave it out of the key, or send a hex or base64 encoding or a hash of a key that has one.".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn order_meta_header_field_hash() {
        let args = json!({"message_id": "m-1", "to": "a@b"});
        let ex = Strategy::Explicit;
        let f = Some("message_id");
        assert_eq!(
            choose(&meta(json!({META_KEY: "k"})), Some("h"), ex, f, &args).unwrap(),
            Key::Client {
                key: "k".into(),
                from: "_meta"
            }
        );
        assert_eq!(
            choose(&meta(json!({META_KEY_SEP: "s"})), Some("h"), ex, f, &args).unwrap(),
            Key::Client {
                key: "s".into(),
                from: "_meta"
            }
        );
        assert_eq!(
            choose(&meta(json!({})), Some("h"), ex, f, &args).unwrap(),
            Key::Client {
                key: "h".into(),
                from: "header"
            }
        );
        assert_eq!(
            choose(&meta(json!({})), None, ex, f, &args).unwrap(),
            Key::Field("m-1".into())
        );
        assert_eq!(
            choose(&meta(json!({})), None, Strategy::HashInput, None, &args).unwrap(),
            Key::HashInput
        );
        assert_eq!(
            choose(&meta(json!({})), None, Strategy::Uuid, None, &args).unwrap(),
            Key::None
        );
    }

    /// Each bad key is told which rule it breaks, with the hint for that rule.
    #[test]
    fn a_long_key_and_a_key_with_nul_are_told_apart() {
        let args = json!({});
        let refused = |key: &str| {
            choose(
                &meta(json!({META_KEY: key})),
                None,
                Strategy::HashInput,
                None,
                &args,
            )
            .unwrap_err()
        };
        let nul = refused("ab\0cd");
        assert_eq!(
            nul.message,
            "the key from the _meta holds U+0000 (a NUL character) at byte 2"
        );
        assert!(nul.hint.contains("U+0000"), "{}", nul.hint);
        assert!(!nul.hint.contains("longer"), "{}", nul.hint);
        assert!(!nul.message.contains("bytes long"), "{}", nul.message);
        let long = refused(&"k".repeat(513));
        assert_eq!(
            long.message,
            "the key from the _meta is 513 bytes long, over the 512 a key may have"
        );
        assert!(long.hint.contains("hash"), "{}", long.hint);
        assert!(!long.hint.contains("U+0000"), "{}", long.hint);
    }

    #[test]
    fn bad_keys_are_refused() {
        let args = json!({"to": "a@b"});
        for (m, h) in [
            (json!({META_KEY: " "}), None),
            (json!({META_KEY: 12}), None),
            (json!({META_KEY: "a", META_KEY_SEP: "b"}), None),
            (json!({}), Some("x".repeat(513))),
        ] {
            assert!(choose(&meta(m), h.as_deref(), Strategy::HashInput, None, &args).is_err());
        }
        assert!(choose(
            &meta(json!({})),
            None,
            Strategy::Explicit,
            Some("message_id"),
            &args
        )
        .is_err());
        assert!(choose(
            &meta(json!({META_KEY: "a", META_KEY_SEP: "a"})),
            None,
            Strategy::HashInput,
            None,
            &args
        )
        .is_ok());
    }
}
