//! The web-service executor against a real local HTTP server (web/provider.rs) that logs
//! every request with its `Idempotency-Key`, over every store: `PgStore` (on whichever
//! backend `PGIDEM_DSN`'s database has installed), `MemoryStore` and `RedisStore` (feature
//! `redis`; skipped with its reason when `REDIS_URL` is unset). One test per (scenario,
//! store), named `<scenario>::<store>`.
//!
//! - web/keys.rs: which methods carry the key and which key; repeats replayed
//! - web/takeover.rs: a hung first attempt taken over sends the same key
//! - web/failures.rs: 5xx (and 409, 429) retried under the same key, after a Retry-After;
//!   4xx per cache_failures; a query input that is not an object refused
//! - web/headers.rs: an authenticated API: the caller's client, static and per-call
//!   headers, the provider's 401, headers never stored, headers in the fingerprint on
//!   request, bad headers refused
//! - web/paths.rs: path parameters from the input, encoded; bad ones claim nothing
//! - web/reads.rs: reads run every time unless their own settings say otherwise; a method
//!   neither a read nor a write is refused until the action says how to treat it
//!
//! - web/upstream_scenarios.rs: against a provider we did not write (express with
//!   express-idempotency, tests/upstream-node/): retries and takeovers execute once

mod common;

mod web {
    pub mod failures;
    pub mod headers;
    pub mod keys;
    pub mod paths;
    pub mod provider;
    pub mod reads;
    pub mod stores;
    pub mod takeover;
    pub mod told;
    pub mod upstream;
    pub mod upstream_scenarios;
}

use web::*;

/// `web! { stores: [..], scenarios: [name => fn, ..] }`: a module per scenario with a
/// `#[tokio::test]` per store (None from the store's maker: skipped, with its reason).
macro_rules! web {
    (stores: $stores:tt, scenarios: [$($name:ident => $scenario:path),* $(,)?]) => {
        $( web!(@scenario $name, $scenario, $stores); )*
    };
    (@scenario $name:ident, $scenario:path, [$($store:ident),* $(,)?]) => {
        mod $name {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    if let Some(store) = stores::$store().await {
                        $scenario(store).await
                    }
                }
            )*
        }
    };
}

web! {
    stores: [postgres, memory, redis],
    scenarios: [
        unsafe_methods_carry_the_key => keys::unsafe_methods_carry_the_key,
        safe_methods_carry_no_key_and_replay => keys::safe_methods_carry_no_key_and_replay,
        key_supplier_called_once => keys::the_key_supplier_is_called_once_per_call,
        uuid_keys_fresh => keys::uuid_keys_are_fresh_on_every_call,
        key_no_header_can_carry => keys::a_key_no_header_can_carry_is_refused,
        takeover_same_key => takeover::a_takeover_sends_the_same_key,
        server_error_retried_same_key => failures::a_5xx_is_retried_under_the_same_key,
        server_error_keeps_record_key => failures::a_5xx_keeps_the_record_key_when_failures_are_rerun,
        client_error_cache_failures => failures::a_4xx_follows_cache_failures,
        unreachable_retried => failures::an_unreachable_provider_is_retried,
        retry_after_believed => failures::a_retry_after_is_the_providers_word,
        query_input_object => failures::a_query_input_must_be_an_object,
        callers_client_and_headers => headers::the_callers_client_and_headers_arrive,
        wrong_token_401 => headers::a_wrong_or_missing_token_gets_the_401,
        headers_never_stored => headers::headers_are_never_stored,
        fingerprint_headers => headers::fingerprint_headers_join_the_fingerprint,
        no_header_value_in_store => headers::no_header_value_reaches_the_store,
        bad_headers_refused => headers::bad_headers_are_refused,
        path_parameters => paths::path_parameters_reach_the_right_path,
        reads_run_every_time => reads::a_read_without_settings_runs_every_time,
        undeclared_method_refused => reads::an_undeclared_method_is_refused_until_the_action_says,
        bad_path_inputs => paths::bad_path_inputs_claim_nothing,
    ]
}

web! {
    stores: [postgres, memory, redis],
    scenarios: [
        retries_execute_once => upstream_scenarios::retries_execute_once,
        takeover_after_provider_finished => upstream_scenarios::a_takeover_after_the_provider_finished,
        takeover_while_provider_runs => upstream_scenarios::a_takeover_while_the_provider_still_runs,
        two_actions_one_key => upstream_scenarios::two_actions_sharing_a_key_send_the_provider_two,
    ]
}
