//! A call's scope: the upstream server, the tool, and the principal the call is made for.
//!
//! The principal is in the scope, so two tenants of one proxy never share a call: the same
//! arguments (or the same key) from two principals are two records. One database role per
//! tenant would isolate them too (each role has its own key space in the SQL API); the
//! scope does it for any number of tenants over one role, and shows the tenant in
//! `idem_metrics()`.
//!
//! The map from (server, tool, principal) to a scope is injective: no two triples share a
//! scope, whatever the tenants name themselves or the tools they call. Two forms:
//!
//! - plain, `mcp:<len(server)>:<server><len(tool)>:<tool>@<principal>`, lengths in bytes:
//!   read from the left, each length says where its part ends, and the principal is the
//!   rest, so a scope is read back into one triple only;
//! - hashed, `mcp#<sha256 hex>` over the three parts, each prefixed by its length, for a
//!   triple whose plain form is longer than the SQL API takes or holds a NUL (which
//!   PostgreSQL text cannot). A plain scope starts with `mcp:`, never `mcp#`, so the two
//!   forms never meet.

use sha2::{Digest, Sha256};

/// The SQL API's limit on a scope's length, in bytes.
pub const SCOPE_MAX: usize = 128;

/// What every hashed scope starts with, and no plain one does.
pub const HASHED_PREFIX: &str = "mcp#";

/// The scope of `tool` of `server` called for `principal`.
pub fn scope_of(server: &str, tool: &str, principal: &str) -> String {
    let plain = format!(
        "mcp:{}:{server}{}:{tool}@{principal}",
        server.len(),
        tool.len()
    );
    if plain.len() <= SCOPE_MAX && !plain.contains('\0') {
        return plain;
    }
    let mut h = Sha256::new();
    for part in [server, tool, principal] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("{HASHED_PREFIX}{hex}")
}

/// The triple a plain scope was made of; None for a hashed scope or any other text.
/// Kept beside `scope_of` so that the tests can show every plain scope reads back into
/// the one triple it came from.
pub fn parse_plain(scope: &str) -> Option<(&str, &str, &str)> {
    let rest = scope.strip_prefix("mcp:")?;
    let (server, rest) = counted(rest)?;
    let (tool, rest) = counted(rest)?;
    let principal = rest.strip_prefix('@')?;
    Some((server, tool, principal))
}

/// `<len>:<text of len bytes>` at the start of `s`: the text and what follows it.
fn counted(s: &str) -> Option<(&str, &str)> {
    let (len, rest) = s.split_once(':')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    if !rest.is_char_boundary(len.min(rest.len())) || len > rest.len() {
        return None;
    }
    Some(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn plain_form_reads_back() {
        let s = scope_of("mail", "send_email", "local");
        assert_eq!(s, "mcp:4:mail10:send_email@local");
        assert_eq!(parse_plain(&s), Some(("mail", "send_email", "local")));
    }

    /// Principal `corp.com` calling `send_email@alice` is not `alice@corp.com` calling
    /// `send_email` (the same text under the old `server/tool@principal` form).
    #[test]
    fn a_tool_name_cannot_carry_a_principal() {
        let victim = scope_of("mail", "send_email", "alice@corp.com");
        let attacker = scope_of("mail", "send_email@alice", "corp.com");
        assert_ne!(victim, attacker);
        let attacker = scope_of("mail/send_email@alice", "x", "corp.com");
        assert_ne!(victim, attacker);
    }

    /// A principal spelled like a hashed scope's tail does not reach a long principal's
    /// hashed scope, and no plain scope is a hashed one.
    #[test]
    fn plain_and_hashed_never_meet() {
        let long = "p".repeat(200);
        let hashed = scope_of("mail", "send_email", &long);
        assert!(hashed.starts_with(HASHED_PREFIX), "{hashed}");
        let tail = &hashed[HASHED_PREFIX.len()..];
        for principal in [
            format!("#{}", &tail[..24]),
            tail.to_string(),
            hashed.clone(),
        ] {
            let s = scope_of("mail", "send_email", &principal);
            assert_ne!(s, hashed);
            assert!(!s.starts_with(HASHED_PREFIX), "{s}");
        }
        // A server or tool named like a hashed scope stays plain too.
        let s = scope_of(&hashed[..20], "t", "p");
        assert!(s.starts_with("mcp:"), "{s}");
    }

    #[test]
    fn stable_and_within_the_limit() {
        for (server, tool, principal) in [
            ("mail", "send_email", "local".to_string()),
            ("mail", "send_email", "p".repeat(200)),
            ("m".repeat(300).as_str(), "t", "p".to_string()),
            ("mail", "a\0b", "p".to_string()),
        ] {
            let s = scope_of(server, tool, &principal);
            assert_eq!(s, scope_of(server, tool, &principal), "stable");
            assert!(s.len() <= SCOPE_MAX, "{s}");
            assert!(!s.contains('\0'), "{s:?}");
        }
        // Fixed forever: records are found by it.
        assert_eq!(
            scope_of("mail", "send_email", &"p".repeat(200)),
            scope_of("mail", "send_email", &"p".repeat(200))
        );
        assert!(scope_of("mail", "a\0b", "p").starts_with(HASHED_PREFIX));
    }

    /// Many triples built from pieces that contain the separators (`:`, `@`, `/`, `#`,
    /// digits) and lengths on both sides of the limit: no two give one scope, and every
    /// plain scope reads back into its own triple.
    #[test]
    fn injective_over_generated_triples() {
        let pieces = [
            "", "a", "@", ":", "1:", "a@b", "b:c", "#", "mcp", "mcp#", "mcp:1:a", "/", "a/b", "12",
            "1:a1:b@", "é", "x@y.z",
        ];
        let long = ["q".repeat(60), "r".repeat(61), "s".repeat(130)];
        let mut all: Vec<String> = pieces.iter().map(|s| s.to_string()).collect();
        all.extend(long.iter().cloned());
        for a in pieces {
            for b in pieces {
                all.push(format!("{a}{b}"));
            }
        }
        let mut seen: HashMap<String, (String, String, String)> = HashMap::new();
        for server in ["mail", "m:1", "@", "m#"] {
            for tool in &all {
                for principal in &all {
                    let s = scope_of(server, tool, principal);
                    assert!(s.len() <= SCOPE_MAX, "{s}");
                    let triple = (server.to_string(), tool.clone(), principal.clone());
                    if let Some((srv, t, p)) = parse_plain(&s) {
                        assert_eq!((srv, t, p), (server, tool.as_str(), principal.as_str()));
                    } else {
                        assert!(s.starts_with(HASHED_PREFIX), "{s}");
                    }
                    if let Some(other) = seen.insert(s.clone(), triple.clone()) {
                        assert_eq!(other, triple, "two triples share {s}");
                    }
                }
            }
        }
        assert!(seen.len() > 100_000, "{} scopes", seen.len());
    }
}
