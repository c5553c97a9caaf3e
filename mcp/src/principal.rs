//! Whom a call is made for. On stdio: the configured identity (`front.principal`, default
//! `local`). On HTTP, the front (auth.rs) names it before MCP sees the request: the
//! principal of the request's client token (`[[front.clients]]`), or, on a request with the
//! gateway's token, the value of its `front.principal_header`; on a front without any
//! credential configured, `front.principal` (default `anonymous`). Nothing else stands in
//! for a missing or wrong token: such a request is answered 401.

use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

use crate::proxy::Proxy;

/// The principal's name, put in the HTTP request's extensions by the front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// stdio's principal when the configuration names none.
pub const LOCAL: &str = "local";

impl Principal {
    pub fn of(context: &RequestContext<RoleServer>, proxy: &Proxy) -> Result<Principal, ErrorData> {
        if let Some(parts) = context.extensions.get::<http::request::Parts>() {
            return parts.extensions.get::<Principal>().cloned().ok_or_else(|| {
                // The HTTP front names every request's principal before MCP sees it.
                ErrorData::internal_error("an HTTP request without a principal", None)
            });
        }
        Ok(Principal(
            proxy.default_principal().unwrap_or(LOCAL).to_string(),
        ))
    }
}

/// A header of the HTTP request that carried the call (none on stdio).
pub fn header(context: &RequestContext<RoleServer>, name: &str) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    parts.headers.get(name)?.to_str().ok().map(str::to_string)
}
