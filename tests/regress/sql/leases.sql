-- Leases and expiry: decided at read time, from the server's wall clock.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- A holder that crashes stops extending; once its lease lapses the call is taken over:
-- a higher fence, attempt 2, recovered (the first attempt's outcome is unknown), and the
-- same upstream key, so the provider sees the same Idempotency-Key again.
SELECT fence AS f1, upstream_key AS u1 FROM idem_begin('send_email', 'crash', lease => '500 ms') \gset
SELECT outcome FROM idem_begin('send_email', 'crash');
-- (Each wait below lasts until the record's own lease_until or expires_at has passed.)
SELECT pg_sleep_until(lease_until + interval '1 ms') AS lapsed FROM idem_lookup('send_email', 'crash');
SELECT outcome, fence > :f1 AS higher_fence, attempt, recovered, upstream_key = :'u1' AS same_upstream_key
FROM idem_begin('send_email', 'crash');
SELECT fence AS f2 FROM idem_lookup('send_email', 'crash') \gset

-- The first holder wakes up: every call with its fence is refused (IK003).
SELECT state FROM idem_complete('send_email', 'crash', :f1, '{"sent": true}');
SELECT idem_extend('send_email', 'crash', :f1);
SELECT idem_release('send_email', 'crash', :f1);
-- The new holder completes.
SELECT state FROM idem_complete('send_email', 'crash', :f2, '{"sent": true}');
SELECT outcome, attempt, response FROM idem_begin('send_email', 'crash');

-- A lapsed lease that nobody took over still lets its holder complete: the fence is the
-- authority, not the clock.
SELECT fence AS f3 FROM idem_begin('send_email', 'slow', lease => '100 ms') \gset
SELECT pg_sleep_until(lease_until + interval '1 ms') AS lapsed FROM idem_lookup('send_email', 'slow');
SELECT count(*) AS still_visible FROM idem_lookup('send_email', 'slow');
SELECT state FROM idem_complete('send_email', 'slow', :f3, '{"sent": true}');

-- Expiry: after its ttl a record is absent, purged or not, and the key is claimed afresh
-- (attempt 1, a new upstream key).
SELECT fence AS f4, upstream_key AS u4 FROM idem_begin('send_email', 'short', ttl => '600 ms', lease => '300 ms') \gset
SELECT state FROM idem_complete('send_email', 'short', :f4, '{"sent": true}');
SELECT outcome FROM idem_begin('send_email', 'short');
SELECT pg_sleep_until((SELECT expires_at FROM idem_lookup('send_email', 'short')) + interval '1 ms') AS expired;
SELECT count(*) AS visible_after_ttl FROM idem_lookup('send_email', 'short');
SELECT outcome, attempt, recovered, upstream_key <> :'u4' AS new_upstream_key, fence > :f4 AS higher_fence
FROM idem_begin('send_email', 'short');
-- An expired claim's holder has lost it too (once its unresolved bound passed as well: a
-- lapsed claim is kept past its ttl for it, here 1 ms).
SELECT fence AS f5 FROM idem_begin('send_email', 'gone', ttl => '100 ms', unresolved_ttl => '1 ms') \gset
SELECT pg_sleep_until((SELECT expires_at FROM idem_lookup('send_email', 'gone')) + interval '1 ms') AS expired;
SELECT state FROM idem_complete('send_email', 'gone', :f5, '{}');

-- The lease defaults to min(pg_idempotency.default_lease, ttl).
SELECT lease_until = expires_at AS lease_capped_by_ttl FROM idem_begin('send_email', 'tiny', ttl => '5 seconds');
SET pg_idempotency.default_lease = '10s';
SELECT round(extract(epoch FROM lease_until - clock_timestamp())) AS lease_seconds FROM idem_begin('send_email', 'ten');
RESET pg_idempotency.default_lease;
SET pg_idempotency.default_ttl = '2h';
SELECT round(extract(epoch FROM expires_at - clock_timestamp()) / 3600) AS ttl_hours FROM idem_begin('send_email', 'two-hours');
RESET pg_idempotency.default_ttl;
