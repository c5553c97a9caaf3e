//! A call's scope: the upstream server, the tool, and the principal the call is made for.
//!
//! The principal is in the scope, so two tenants of one proxy never share a call: the same
//! arguments (or the same key) from two principals are two records. One database role per
//! tenant would isolate them too (each role has its own key space in the SQL API); the
//! scope does it for any number of tenants over one role, and shows the tenant in
//! `idem_metrics()`.

use sha2::{Digest, Sha256};

/// The SQL API's limit on a scope's length, in bytes.
const SCOPE_MAX: usize = 128;

/// `server/tool@principal`; a longer one than the SQL API takes is shortened by a hash that
/// keeps it unique (its principal first, then the whole).
pub fn scope_of(server: &str, tool: &str, principal: &str) -> String {
    let plain = format!("{server}/{tool}@{principal}");
    if plain.len() <= SCOPE_MAX {
        return plain;
    }
    let hashed = format!("{server}/{tool}@#{}", &hex(principal)[..24]);
    if hashed.len() <= SCOPE_MAX {
        return hashed;
    }
    format!("mcp#{}", hex(&plain))
}

fn hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_hashed_and_whole() {
        assert_eq!(
            scope_of("mail", "send_email", "local"),
            "mail/send_email@local"
        );
        let long = "p".repeat(200);
        let s = scope_of("mail", "send_email", &long);
        assert!(
            s.starts_with("mail/send_email@#") && s.len() <= SCOPE_MAX,
            "{s}"
        );
        assert_ne!(s, scope_of("mail", "send_email", &"q".repeat(200)));
        let s = scope_of("mail", &"t".repeat(150), "local");
        assert!(s.starts_with("mcp#") && s.len() <= SCOPE_MAX, "{s}");
    }
}
