-- Failures: cached or not, and what a repeat gets under each on_cache_hit.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- An uncached failure leaves nothing behind: a retry runs the call again.
SELECT fence AS f FROM idem_begin('charge_card', 'c-1') \gset
SELECT state, expires_at FROM idem_complete('charge_card', 'c-1', :f, '{"error": "timeout"}', succeeded => false);
SELECT count(*) AS rows FROM idem_lookup('charge_card', 'c-1');
SELECT outcome, attempt FROM idem_begin('charge_card', 'c-1');

-- A cached failure is replayed by default ...
SELECT fence AS f FROM idem_begin('charge_card', 'c-2') \gset
SELECT state FROM idem_complete('charge_card', 'c-2', :f, '{"error": "card declined"}',
                                succeeded => false, cache_failure => true);
SELECT outcome, succeeded, response FROM idem_begin('charge_card', 'c-2');
SELECT outcome, succeeded, response FROM idem_begin('charge_card', 'c-2', on_cache_hit => 'return_cached');

-- ... claimed again under return_cached_if_success (same call: attempt 2, same upstream key) ...
SELECT upstream_key AS u FROM idem_lookup('charge_card', 'c-2') \gset
SELECT outcome, attempt, recovered, upstream_key = :'u' AS same_upstream_key
FROM idem_begin('charge_card', 'c-2', on_cache_hit => 'return_cached_if_success');
SELECT fence AS f FROM idem_lookup('charge_card', 'c-2') \gset
SELECT state FROM idem_complete('charge_card', 'c-2', :f, '{"charge": "ch_1"}');
-- ... and a remembered success is replayed under it.
SELECT outcome, succeeded, response FROM idem_begin('charge_card', 'c-2', on_cache_hit => 'return_cached_if_success');

-- fail_fast refuses a repeat of a completed call (IK002) ...
SELECT outcome FROM idem_begin('charge_card', 'c-2', on_cache_hit => 'fail_fast');
-- ... but a call still running is in_progress, as always.
SELECT outcome FROM idem_begin('charge_card', 'c-3');
SELECT outcome FROM idem_begin('charge_card', 'c-3', on_cache_hit => 'fail_fast');

-- Mismatch: the same key with a different request is refused (IK001), with both fingerprints.
SELECT outcome FROM idem_begin('create_issue', 'i-1', '{"title": "Crash", "body": "a"}');
SELECT outcome FROM idem_begin('create_issue', 'i-1', '{"title": "Crash", "body": "b"}');
-- ... unless the caller says the key alone names the call.
SELECT outcome FROM idem_begin('create_issue', 'i-1', '{"title": "Crash", "body": "b"}', on_mismatch => 'ignore');
-- A call without a request is compared with nothing.
SELECT outcome FROM idem_begin('create_issue', 'i-1');
-- The stored fingerprint is the first request's.
SELECT fingerprint = idem_hash('{"title": "Crash", "body": "a"}') AS first_request
FROM idem_lookup('create_issue', 'i-1');
