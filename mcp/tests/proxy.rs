//! `pg-idempotency-mcp`, the real binary, with real MCP parts around it, one test binary
//! (each topic a module of proxy/):
//!
//! - proxy/dedupe.rs: the proxy's behaviours over stdio, in front of the counting server
//!   (the official Python SDK), effects counted in its log
//! - proxy/defaults.rs: the defaults per tool: a tool without annotations passes (a read
//!   sees the present), an annotated write is deduplicated, and the listing says so
//! - proxy/http.rs: over Streamable HTTP in front and behind: `Idempotency-Key`, bearer
//!   tokens naming principals, a cancelled call, an oversized result
//! - proxy/passthrough.rs: everything but a deduplicated `tools/call` passes through as it
//!   came (the reference server-everything behind, a host with every capability in front)
//! - proxy/sdk_callers.rs: the official TypeScript and Python SDKs' clients as callers,
//!   the reference memory and filesystem servers behind
//! - proxy/attack_auth.rs: attacks on the HTTP front's authentication: tokens, the
//!   gateway's principal header, a default principal, an open public front, `Origin`
//! - proxy/attack_limits.rs: what the HTTP front holds is bounded (sessions per principal
//!   and in all, unused sessions, upstream processes, connections, slow headers and bodies),
//!   and a session answers only the principal that initialized it
//! - proxy/faults.rs: the proxy or the upstream killed mid-call, an answer lost: one effect
//!   per key
//! - proxy/attack_scope.rs: tenants that name themselves or their tools into another's
//!   scope, tools never listed, tool names outside the rules, records of the old scope form
//! - proxy/attack_exposure.rs: what a tenant is told when the store or the upstream fails:
//!   no database text, no upstream address, no fingerprints
//! - proxy/attack_malformed.rs: malformed messages as raw bytes on both fronts (garbage,
//!   JSON that is no message, batches, empty bodies, a wrong Content-Type, lines and bodies
//!   over the bound): each answered with a JSON-RPC error, and the session goes on; a
//!   session's DELETE answered 200; a bad key's and a reused key's words
//! - proxy/upstream_life.rs: a stdio upstream never outlives the proxy: the proxy SIGKILLed
//!   before and after the effect (over its HTTP front, and over its stdio front before it),
//!   the retry through another replica under each `on_unknown_outcome`; the server's own
//!   children end with the proxy
//! - proxy/attack_flood.rs: a flood of waiting duplicates: the running call's heartbeat
//!   goes on, the caps answer at once, another principal's calls go on, a pool with no
//!   free connection answers store_unavailable
//! - proxy/answered_first.rs: the first caller answered before the record is written: a
//!   host that ends a stdio proxy right after the answer finds the call recorded, and a
//!   duplicate right after the answer is a replay
//! - proxy/own_holder.rs: a retry in the holder's own proxy after an outage of the store
//!   past the lease joins that holder: one effect

mod common;

mod proxy {
    pub mod answered_first;
    pub mod attack_auth;
    pub mod attack_exposure;
    pub mod attack_flood;
    pub mod attack_limits;
    pub mod attack_malformed;
    pub mod attack_scope;
    pub mod dedupe;
    pub mod defaults;
    pub mod faults;
    pub mod http;
    pub mod own_holder;
    pub mod passthrough;
    pub mod sdk_callers;
    pub mod upstream_life;
}
