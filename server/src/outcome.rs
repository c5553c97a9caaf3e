//! What a handler's answer leaves in the store: its result remembered, or the claim given
//! up so that a retry runs the handler again.

use http::{HeaderMap, StatusCode};

use crate::rule::Rule;
use crate::stored::is_no_store;

/// The fate of a claimed request's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// 2xx and 3xx: completed as a success, replayed.
    Succeeded,
    /// A client error the route caches: completed as a failure, replayed.
    CachedFailure,
    /// Given up: a retry runs the handler again.
    Released(Why),
}

/// Why a claim was given up (logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    ServerError,
    ClientError,
    NoStore,
    Informational,
    /// Streamed (no exact length) or longer than the layer keeps.
    NotBuffered,
    HandlerFailed,
    HandlerPanicked,
    /// The handler's transaction did not commit its completion.
    RolledBack,
}

/// What the answer's status and headers leave, under the route's rule.
pub fn fate(status: StatusCode, headers: &HeaderMap, rule: &Rule) -> Fate {
    if status.is_server_error() {
        return Fate::Released(Why::ServerError);
    }
    if status.is_informational() {
        return Fate::Released(Why::Informational);
    }
    if is_no_store(headers) {
        return Fate::Released(Why::NoStore);
    }
    if status.is_client_error() {
        return if rule.caches(status) {
            Fate::CachedFailure
        } else {
            Fate::Released(Why::ClientError)
        };
    }
    Fate::Succeeded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::ClientErrors;

    fn of(status: u16, rule: Rule) -> Fate {
        fate(
            StatusCode::from_u16(status).unwrap(),
            &HeaderMap::new(),
            &rule,
        )
    }

    #[test]
    fn statuses() {
        let cache = Rule::required();
        let release = Rule::required().client_errors(ClientErrors::Release);
        assert_eq!(of(201, cache), Fate::Succeeded);
        assert_eq!(of(303, cache), Fate::Succeeded);
        assert_eq!(of(400, cache), Fate::CachedFailure);
        assert_eq!(of(400, release), Fate::Released(Why::ClientError));
        assert_eq!(of(429, cache), Fate::Released(Why::ClientError));
        assert_eq!(of(409, cache), Fate::Released(Why::ClientError));
        assert_eq!(of(500, cache), Fate::Released(Why::ServerError));
    }

    #[test]
    fn no_store_releases_a_success() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CACHE_CONTROL,
            "private, No-Store".parse().unwrap(),
        );
        assert_eq!(
            fate(StatusCode::OK, &h, &Rule::required()),
            Fate::Released(Why::NoStore)
        );
    }
}
