//! One behaviour suite over every store: each scenario (client/tests/parity/<topic>.rs)
//! runs against `PgStore` (on whichever backend `PGIDEM_DSN`'s database has installed,
//! the extension or the portable SQL: the test command runs this suite once per backend
//! and PostgreSQL version), `MemoryStore` and `RedisStore` (feature `redis`; skipped with
//! its reason when `REDIS_URL` is unset). One test per (scenario, store), named
//! `<scenario>::<store>`, so a failure names both.
//!
//! The record's state machine is written three times: pg_idempotency_protocol::decide
//! (protocol/src/decide.rs), which the extension (pg_idempotency/src/begin.rs, holder.rs)
//! and `MemoryStore` (client/src/memory.rs) take every decision through, the portable
//! PL/pgSQL variant (sql/pg_idempotency.sql), and `RedisStore`'s scripts
//! (client/src/redis_lua/). The SQL two are the reference (the behaviour suite and the
//! golden files hold them equal); this suite holds the client's stores to them. Postgres-only behaviour (the caller's transaction, a missing
//! extension, a session ended mid-call) is in pg_store.rs.
//!
//! # The golden SQL files' state-machine scenarios and their twins here
//!
//! tests/regress/sql/ (expected output in tests/regress/expected/), scenario -> test:
//!
//! - lifecycle.sql
//!   - a first call claims and gets a fence; a duplicate learns it runs, never the fence;
//!     the holder completes; a repeat replays; completing again with the same fence keeps
//!     the result; the record as idem_lookup shows it -> `lifecycle_claim_complete_replay`
//!   - the same key in another scope is another call -> `lifecycle_another_scope`
//!   - release leaves nothing, the next begin claims afresh -> `lifecycle_release`
//!   - extend pushes the lease, the expiry covers it, the default lease ->
//!     `lifecycle_extend`
//!   - the same request, spelled differently, finds the same call -> `mismatch_rejected`
//!   - forget removes a record, forgetting it again answers false, the next begin claims
//!     with attempt 1 -> `forget_runs_again`
//! - failures.sql
//!   - an uncached failure leaves nothing, a retry runs again -> `failures_uncached`
//!   - a cached failure is replayed by default and under return_cached ->
//!     `failures_cached`
//!   - return_cached_if_success claims it again (attempt 2, same upstream key), then
//!     replays the success -> `failures_return_cached_if_success`
//!   - fail_fast refuses a completed call, a running one is in_progress ->
//!     `failures_fail_fast`
//!   - mismatch refused with both fingerprints; ignore; no request compared with nothing;
//!     the stored fingerprint is the first request's -> `mismatch_rejected`,
//!     `mismatch_first_request_stays`
//! - leases.sql
//!   - a lapsed lease is taken over (higher fence, attempt 2, recovered, same upstream
//!     key); the old fence refused on complete, extend and release; the new holder
//!     completes -> `takeover_lapsed_lease`
//!   - a lapsed lease nobody took over still completes -> `takeover_not_taken_over`
//!   - after its ttl a record is absent and claimed afresh (attempt 1, new upstream key,
//!     higher fence) -> `expiry_claimed_afresh`
//!   - an expired claim's holder has lost it -> `expiry_holder_lost_it`
//!   - the lease defaults to min(default lease, ttl) -> `lifecycle_default_lease_capped`
//! - errors.sql
//!   - 22023 scope and key: blank, whitespace, too long (bytes, not characters), the
//!     limits themselves accepted -> `limits_refused`, `limits_accepted`, `errors_words`
//!   - 22023 durations: ttl zero or too long, lease zero, too long or above the ttl, wait
//!     too long -> the same three
//!   - none of the above wrote anything -> `limits_refused` (every row, the record it
//!     names compared before and after)
//!   - IK003 lease lost: a fence that never held the record, a negative one, an absent
//!     key, a released record, a completed record released or extended ->
//!     `fence_stale_and_unknown`, `errors_words`
//! - metrics.sql, counters.sql
//!   - live records by state, lapsed, expired, the oldest running call; the outcome
//!     counters (NULL on the portable variant) -> `metrics_counts`
//! - transactions.sql: none (see below)
//! - batch.sql
//!   - each item answered as a single call, in the order given (claim, replay,
//!     in_progress, mismatch, a key twice), refused repeats, per-item lost leases and an
//!     uncached failure, a bad item failing the whole batch -> `batch_answers`,
//!     `batch_completes`, `batch_refuses`
//! - purge.sql
//!   - purge removes expired records and never a live claim, a live result or a claim
//!     whose lease lapsed within its ttl; that claim's holder still completes ->
//!     `expiry_purge`
//! - policies.sql
//!   - a policy lease longer than the call's ttl is capped by it -> `lifecycle_default_
//!     lease_capped` (the default lease, the one such cap a store without policies has)
//!   - cache_failures dropped when the call says so -> `failures_uncached`
//!     (cache_failure false given by the call)
//!
//! And from the client: `lease_error_releases` (a tool stopped by `ensure_lease` leaves
//! no remembered failure), `batch_scripts_forgotten` (RedisStore's pipeline after Redis
//! forgot its scripts), `wait_*` (the isolation specs' waiting duplicate, in each store),
//! `claim_token_repeat`, `race_one_claim`; `forget_holder_lost_it` and
//! `forget_wakes_a_waiter` (what idem_forget's deletion means to a running claim);
//! `retry_after_*` (protocol/src/estimate.rs's rule for a duplicate's `retry_after`);
//! `stopped_*` (the same rule for a holder that stopped beating, and the wait it ends).
//!
//! Judged SQL-only (no twin here), and why:
//!
//! - lifecycle.sql: named arguments in any order (SQL call syntax); HASH_INPUT with a NULL
//!   key (the client always names its key; its HashInput strategy is the canonical hash,
//!   tested in calls/dispatcher.rs and canon); the lookup columns `ttl` and `owner` (not in the
//!   client's `Record`).
//! - failures.sql: nothing.
//! - leases.sql: `SET pg_idempotency.default_lease` / `default_ttl` (server settings).
//! - errors.sql: NULL scope, key, fence or succeeded (the Rust types cannot be null);
//!   negative durations (`Duration` cannot be); unknown policy words (typed enums);
//!   lowered `max_key_bytes` / `max_ttl` (server settings; the local stores' limits are
//!   the settings' defaults); a lowered `max_response_bytes` (a server setting; the local
//!   stores hold the default, measured on JSON text where the server measures jsonb, so
//!   refusals.rs's IK004 case is twice the limit); an error rolling back its transaction
//!   (SQL transactions).
//! - transactions.sql: all of it (a claim in a rolled-back transaction or savepoint, a
//!   committed claim with its write, the wall clock inside a transaction): SQL
//!   transactions, which only `PgStore` joins (pg_store.rs has the rolled-back claim).
//! - purge.sql: purge's batch_size (not in the store interface).
//! - batch.sql: a NULL key (HASH_INPUT) and arrays of different lengths or NULL (the
//!   client's items always name their key and carry their own fields).
//! - policies.sql: idem_set_policy and its precedence over the defaults, policy
//!   validation, idem_drop_policy: per-scope policies are the database's; `MemoryStore`
//!   and `RedisStore` have none.

mod common;

mod parity {
    pub mod batch;
    pub mod claim_token;
    pub mod errors;
    pub mod expiry;
    pub mod failures;
    pub mod fence;
    pub mod forget;
    pub mod harness;
    pub mod lease_errors;
    pub mod lifecycle;
    pub mod limits;
    pub mod metrics;
    pub mod mismatch;
    pub mod race;
    pub mod refusals;
    pub mod retry_after;
    pub mod stopped;
    pub mod support;
    pub mod takeover;
    pub mod unresolved;
    pub mod wait;
    pub mod waiting;
}

use parity::harness::Harness;
use parity::*;

/// `parity! { stores: [..], scenarios: [name => fn, ..] }`: a module per scenario with a
/// `#[tokio::test]` per store, each making its store with `Harness::<store>()` (None: the
/// store is skipped, with its reason recorded) and running the scenario on it.
macro_rules! parity {
    (stores: $stores:tt, scenarios: [$($name:ident => $scenario:path),* $(,)?]) => {
        $( parity!(@scenario $name, $scenario, $stores); )*
    };
    (@scenario $name:ident, $scenario:path, [$($store:ident),* $(,)?]) => {
        mod $name {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    if let Some(h) = Harness::$store().await {
                        $scenario(h).await
                    }
                }
            )*
        }
    };
}

parity! {
    stores: [postgres, memory, redis],
    scenarios: [
        lifecycle_claim_complete_replay => lifecycle::claim_complete_replay,
        lifecycle_another_scope => lifecycle::another_scope_is_another_call,
        lifecycle_release => lifecycle::release_leaves_nothing,
        lifecycle_extend => lifecycle::extend_pushes_the_lease,
        lifecycle_default_lease_capped => lifecycle::default_lease_is_capped_by_the_ttl,
        lifecycle_responses => lifecycle::responses_come_back_as_given,
        failures_uncached => failures::an_uncached_failure_leaves_nothing,
        failures_cached => failures::a_cached_failure_is_replayed,
        failures_return_cached_if_success => failures::return_cached_if_success_reruns_a_failure,
        failures_fail_fast => failures::fail_fast_refuses_a_completed_call,
        takeover_lapsed_lease => takeover::a_lapsed_lease_is_taken_over,
        takeover_not_taken_over => takeover::a_lapsed_lease_not_taken_over_still_completes,
        fence_stale_and_unknown => fence::stale_and_unknown_fences_are_refused,
        wait_gets_the_replay => wait::a_waiting_duplicate_gets_the_replay,
        wait_claims_after_release => wait::a_waiting_duplicate_claims_after_a_release,
        wait_runs_out => wait::a_wait_that_runs_out_answers_in_progress,
        claim_token_repeat => claim_token::a_repeat_with_the_token_gets_the_claim_back,
        mismatch_rejected => mismatch::a_different_request_is_rejected_unless_ignored,
        mismatch_first_request_stays => mismatch::the_first_request_stays_the_fingerprint,
        expiry_claimed_afresh => expiry::an_expired_record_is_claimed_afresh,
        expiry_holder_lost_it => expiry::an_expired_claims_holder_has_lost_it,
        expiry_purge => expiry::purge_removes_only_expired_records,
        unresolved_claim_taken_over => unresolved::a_lapsed_claim_past_its_ttl_is_taken_over,
        unresolved_marks_kept => unresolved::marks_and_lapsed_claims_outlive_the_ttl_and_purge,
        unresolved_bound_ends_it => unresolved::past_the_unresolved_bound_the_key_is_claimed_afresh,
        limits_refused => limits::every_refusal_has_its_kind_and_changes_nothing,
        limits_accepted => limits::the_values_at_the_limits_are_accepted,
        errors_words => errors::every_refusal_has_the_sql_apis_words,
        race_one_claim => race::concurrent_begins_give_one_claim,
        forget_runs_again => forget::a_forgotten_call_runs_again,
        forget_holder_lost_it => forget::a_forgotten_claims_holder_has_lost_it,
        forget_wakes_a_waiter => forget::a_waiting_duplicate_claims_after_a_forget,
        metrics_counts => metrics::counts_records_and_outcomes,
        retry_after_unknown => retry_after::without_an_estimate_unknown_bounded_by_the_lease,
        retry_after_estimate => retry_after::the_estimate_less_the_time_run,
        retry_after_floor => retry_after::past_the_estimate_the_floor_bounded_by_the_lease,
        stopped_retry_after => stopped::a_stopped_holder_is_given_the_lease_left,
        stopped_ends_the_wait => stopped::a_waiting_duplicate_of_a_stopped_holder_stops_waiting,
        stopped_beating_keeps_waiting => stopped::a_beating_holder_keeps_its_duplicate_waiting,
        batch_answers => batch::each_item_is_answered_as_a_single_call,
        batch_completes => batch::each_item_is_completed_under_its_fence,
        batch_refuses => batch::a_bad_item_fails_the_batch_and_changes_nothing,
        batch_scripts_forgotten => batch::a_batch_after_the_scripts_were_forgotten,
        lease_error_releases => lease_errors::an_unconfirmed_lease_releases_the_call,
    ]
}
