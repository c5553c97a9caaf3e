//! The `[front]` table checked at start, alone and together (`Front::check`, which
//! `Config::check` runs): what authenticates a request and who it calls as. Here, not in
//! config.rs, because it asks auth.rs and origin.rs, which read the table's types.

use anyhow::{bail, Result};

use crate::auth;
use crate::config::{Front, FrontTransport};
use crate::front::DEFAULT_LISTEN;
use crate::origin;

impl Front {
    /// The front's settings, alone and together. On HTTP, every combination that would let
    /// a request in without a credential, or let something else stand in for one, is
    /// refused, and so are tokens a client could guess or share (read from their variables
    /// through `env`). Each message says what to do.
    pub fn check(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
        for (i, c) in self.clients.iter().enumerate() {
            let at = auth::client_entry(i, c);
            if c.token.is_none() == c.token_env.is_none() {
                bail!("{at} needs exactly one of token and token_env");
            }
            if c.principal.trim().is_empty() {
                bail!("{at} names no principal: set principal to whom its calls are made for");
            }
        }
        if self.gateway_token.is_some() && self.gateway_token_env.is_some() {
            bail!("[front] names both gateway_token and gateway_token_env: choose one");
        }
        if let Some(name) = &self.principal_header {
            auth::principal_header_name(name)?;
        }
        for origin in self.allowed_origins.iter().flatten() {
            origin::Origin::configured(origin)?;
        }
        if self.transport == FrontTransport::Http {
            self.check_http(env)?;
        }
        Ok(())
    }

    fn check_http(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<()> {
        let credentials = auth::Credentials::resolve(self, env)?;
        let gateway = self.gateway_token.is_some() || self.gateway_token_env.is_some();
        if self.principal_header.is_some() && !gateway {
            bail!(
                "[front] principal_header is set without a gateway credential: anyone who can \
                 reach the proxy could name any principal in it. Set [front] gateway_token_env \
                 (or gateway_token) to the token your gateway sends as its bearer token, or \
                 remove principal_header"
            );
        }
        if gateway && self.principal_header.is_none() {
            bail!(
                "[front] gateway_token is set without principal_header: set principal_header \
                 to the header in which the gateway names the principal, or remove the gateway \
                 token"
            );
        }
        if !credentials.is_empty() {
            if let Some(p) = &self.principal {
                bail!(
                    "[front] principal = {p:?} (or --principal) is set next to bearer tokens: on \
                     HTTP a request's principal comes from its token, and a request without one \
                     is refused. Remove principal; give a client that should call as {p:?} a \
                     [[front.clients]] entry of its own"
                );
            }
            if self.allow_unauthenticated {
                bail!(
                    "[front] allow_unauthenticated (or --allow-unauthenticated) is set next to \
                     bearer tokens, which every request must carry: remove one of them"
                );
            }
            return Ok(());
        }
        let listen = self.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
        if !self.allow_unauthenticated && !is_loopback(listen) {
            bail!(
                "the HTTP front would listen on {listen}, which is not a loopback address, with \
                 no authentication: anyone who reaches it could make calls and replay every \
                 result. Add [[front.clients]] bearer tokens (or a gateway: principal_header \
                 with gateway_token_env), listen on 127.0.0.1, or, to serve everyone as \
                 {:?} on purpose, set [front] allow_unauthenticated = true \
                 (--allow-unauthenticated)",
                self.principal.as_deref().unwrap_or(auth::ANONYMOUS)
            );
        }
        Ok(())
    }
}

/// Whether a listen address only takes connections from this machine: a loopback IP, or
/// `localhost`. Any other name counts as not loopback, whatever it resolves to today.
pub fn is_loopback(listen: &str) -> bool {
    if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
        return addr.ip().is_loopback();
    }
    listen
        .rsplit_once(':')
        .is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost"))
}
