//! Who is calling which route: the store scope that keeps keys of different principals and
//! routes apart.

use sha2::{Digest, Sha256};

/// The caller (an account, a tenant, an API key's id) and the route template (axum's
/// `MatchedPath`, say). Two requests share a record only when both are equal and so is
/// the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub principal: String,
    pub route: String,
}

impl Scope {
    pub fn new(principal: impl Into<String>, route: impl Into<String>) -> Scope {
        Scope {
            principal: principal.into(),
            route: route.into(),
        }
    }

    /// The scope as the store names it, at most `max_bytes` long. The principal's length
    /// comes first, so that no principal and route run into another pair
    /// (`a` + `:b/c` vs `a:b` + `/c`); a pair too long for the store, or with a character
    /// it cannot keep (NUL), is named by its SHA-256 under another prefix, so the two
    /// forms never meet either.
    pub fn store_scope(&self, max_bytes: usize) -> String {
        let plain = format!(
            "http:{}:{}{}",
            self.principal.len(),
            self.principal,
            self.route
        );
        if plain.len() <= max_bytes && !plain.contains('\0') {
            return plain;
        }
        let mut h = Sha256::new();
        h.update((self.principal.len() as u64).to_be_bytes());
        h.update(self.principal.as_bytes());
        h.update(self.route.as_bytes());
        let hex: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        format!("http#{hex}")
    }
}

/// Names the caller and the route of a request; None refuses it (401): there is no
/// anonymous fallback, under which every caller's keys would meet.
pub type ScopeFn = dyn Fn(&http::request::Parts) -> Option<Scope> + Send + Sync;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_and_route_never_run_into_another_pair() {
        let a = Scope::new("a", ":b/c").store_scope(128);
        let b = Scope::new("a:b", "/c").store_scope(128);
        assert_ne!(a, b);
        assert_eq!(a, "http:1:a:b/c");
    }

    #[test]
    fn a_long_pair_is_hashed_within_the_limit() {
        let long = Scope::new("p".repeat(200), "/charges");
        let s = long.store_scope(128);
        assert!(s.starts_with("http#") && s.len() <= 128, "{s}");
        assert_ne!(s, Scope::new("p".repeat(201), "/charges").store_scope(128));
        assert_eq!(s, long.store_scope(128), "stable");
    }

    #[test]
    fn nul_is_hashed() {
        let s = Scope::new("a\0b", "/x").store_scope(128);
        assert!(s.starts_with("http#"), "{s}");
    }
}
