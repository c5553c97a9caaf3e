-- Policies: per-scope defaults. A call's argument overrides its scope's policy, which
-- overrides the GUC defaults; each field on its own.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_by
FROM idem_set_policy('pay', ttl => '2 hours', lease => '5 minutes', on_cache_hit => 'fail_fast',
                     cache_failures => true, on_mismatch => 'ignore');
SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch FROM idem_policies();

-- ttl and lease: the policy's, unless the call gives its own.
SELECT expires_at - lease_until AS ttl_minus_lease FROM idem_begin('pay', 't1');
SELECT expires_at - lease_until AS ttl_minus_lease FROM idem_begin('pay', 't2', ttl => '1 hour');
SELECT expires_at - lease_until AS ttl_minus_lease FROM idem_begin('pay', 't3', lease => '1 minute');
-- A policy lease longer than the call's ttl is capped by it (a call's own would be an error).
SELECT lease_until = expires_at AS capped FROM idem_begin('pay', 't4', ttl => '1 minute');

-- on_mismatch: ignore from the policy, reject from the call.
SELECT outcome FROM idem_begin('pay', 'm1', '{"amount": 1}');
SELECT outcome FROM idem_begin('pay', 'm1', '{"amount": 2}');
SELECT outcome FROM idem_begin('pay', 'm1', '{"amount": 2}', on_mismatch => 'reject');

-- cache_failures: a failure is kept by the policy, dropped when the call says so.
SELECT fence AS f FROM idem_begin('pay', 'c1') \gset
SELECT state FROM idem_complete('pay', 'c1', :f, '{"error": "declined"}', succeeded => false);
SELECT fence AS f FROM idem_begin('pay', 'c2') \gset
SELECT state FROM idem_complete('pay', 'c2', :f, '{"error": "declined"}', succeeded => false, cache_failure => false);

-- on_cache_hit: fail_fast from the policy, return_cached from the call.
SELECT outcome FROM idem_begin('pay', 'c1');
SELECT outcome, succeeded, response FROM idem_begin('pay', 'c1', on_cache_hit => 'return_cached');

-- extend: the policy's lease (capped by the record's ttl), unless the call gives one.
SELECT fence AS f FROM idem_begin('pay', 'e1') \gset
SELECT round(extract(epoch FROM lease_until - clock_timestamp()) / 60) AS lease_minutes FROM idem_extend('pay', 'e1', :f);
SELECT round(extract(epoch FROM lease_until - clock_timestamp()) / 60) AS lease_minutes FROM idem_extend('pay', 'e1', :f, '10 minutes');

-- A policy replaces the previous one whole; NULL fields go back to the defaults.
SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch FROM idem_set_policy('pay', ttl => '10 minutes');
SELECT round(extract(epoch FROM lease_until - clock_timestamp())) AS default_lease_seconds,
       expires_at - lease_until AS ttl_minus_lease
FROM idem_begin('pay', 'r1');
SELECT outcome FROM idem_begin('pay', 'm1', '{"amount": 3}');

-- Removing it: the defaults again.
SELECT idem_drop_policy('pay') AS dropped, idem_drop_policy('pay') AS dropped_again;
SELECT count(*) AS policies FROM idem_policies();
SELECT expires_at - lease_until AS ttl_minus_lease FROM idem_begin('pay', 'd1');

-- Policy values are checked like call arguments (22023), and nothing is stored.
SELECT * FROM idem_set_policy('pay', ttl => '0');
SELECT * FROM idem_set_policy('pay', ttl => '1 hour', lease => '2 hours');
SELECT * FROM idem_set_policy('pay', lease => '40 days');
SELECT * FROM idem_set_policy('pay', on_cache_hit => 'sometimes');
SELECT * FROM idem_set_policy('pay', on_mismatch => 'REJECT');
SELECT * FROM idem_set_policy('', ttl => '1 hour');
SELECT * FROM idem_drop_policy(NULL);
SELECT count(*) AS policies FROM idem_policies();
