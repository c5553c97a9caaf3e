//! Which requests a route keys, and what becomes of its client errors.

use http::StatusCode;

/// Whether a route's requests carry `Idempotency-Key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// A request without the header is refused (400).
    Required,
    /// A request without the header runs as it would without the layer.
    Optional,
    /// The layer leaves the route alone, header or not.
    Off,
}

/// What a 4xx answer of a claimed request leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientErrors {
    /// Remembered and replayed, as Stripe does: the same request gets the same refusal.
    /// 408, 409, 425 and 429 are released all the same: they say "try again".
    Cache,
    /// Released: a retry runs the handler again.
    Release,
}

/// A route's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub presence: Presence,
    pub client_errors: ClientErrors,
}

impl Rule {
    pub fn required() -> Rule {
        Rule {
            presence: Presence::Required,
            client_errors: ClientErrors::Cache,
        }
    }

    pub fn optional() -> Rule {
        Rule {
            presence: Presence::Optional,
            client_errors: ClientErrors::Cache,
        }
    }

    pub fn off() -> Rule {
        Rule {
            presence: Presence::Off,
            client_errors: ClientErrors::Cache,
        }
    }

    pub fn client_errors(mut self, which: ClientErrors) -> Rule {
        self.client_errors = which;
        self
    }

    /// Whether this rule remembers a client error with this status.
    pub(crate) fn caches(&self, status: StatusCode) -> bool {
        self.client_errors == ClientErrors::Cache && !says_try_again(status)
    }
}

/// Client errors that tell the caller to come back: remembering them would answer every
/// retry with "try again" until the record expires.
fn says_try_again(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 409 | 425 | 429)
}

impl Default for Rule {
    /// Optional, client errors cached.
    fn default() -> Rule {
        Rule::optional()
    }
}
