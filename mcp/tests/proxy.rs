//! `pg-idempotency-mcp`, the real binary, with real MCP parts around it, one test binary
//! (each topic a module of proxy/):
//!
//! - proxy/dedupe.rs: the proxy's behaviours over stdio, in front of the counting server
//!   (the official Python SDK), effects counted in its log
//! - proxy/http.rs: over Streamable HTTP in front and behind: `Idempotency-Key`, bearer
//!   tokens naming principals, a cancelled call, an oversized result
//! - proxy/passthrough.rs: everything but a deduplicated `tools/call` passes through as it
//!   came (the reference server-everything behind, a host with every capability in front)
//! - proxy/sdk_callers.rs: the official TypeScript and Python SDKs' clients as callers,
//!   the reference memory and filesystem servers behind
//! - proxy/faults.rs: the proxy or the upstream killed mid-call, an answer lost: one effect
//!   per key
//! - proxy/attack_flood.rs: a flood of waiting duplicates: the running call's heartbeat
//!   goes on, the caps answer at once, another principal's calls go on, a pool with no
//!   free connection answers store_unavailable

mod common;

mod proxy {
    pub mod attack_flood;
    pub mod dedupe;
    pub mod faults;
    pub mod http;
    pub mod passthrough;
    pub mod sdk_callers;
}
