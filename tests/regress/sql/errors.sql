-- Every error: a stable SQLSTATE (shown first), a detail and a hint, and nothing changed.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
-- Limits are set by those who may: a superuser's pg_idempotency.* settings for the
-- extension, the storage's settings table (its owner's) for the portable variant.
SELECT to_regclass('idempotency.settings') IS NOT NULL AS portable \gset

-- 22023 invalid argument: scope and key.
SELECT * FROM idem_begin(NULL, 'k');
SELECT * FROM idem_begin('', 'k');
SELECT * FROM idem_begin('   ', 'k');
SELECT * FROM idem_begin(repeat('s', 129), 'k');
SELECT outcome FROM idem_begin(repeat('s', 128), 'k');
SELECT * FROM idem_begin('scope', '');
SELECT * FROM idem_begin('scope', NULL);
SELECT * FROM idem_begin('scope', repeat('k', 513));
SELECT outcome FROM idem_begin('scope', repeat('k', 512));
-- Limits count bytes, not characters.
SELECT * FROM idem_begin('scope', repeat('é', 257));
\if :portable
UPDATE idempotency.settings SET max_key_bytes = 8;
\else
SET pg_idempotency.max_key_bytes = 8;
\endif
SELECT * FROM idem_begin('scope', 'ninebytes');
\if :portable
UPDATE idempotency.settings SET max_key_bytes = DEFAULT;
\else
RESET pg_idempotency.max_key_bytes;
\endif

-- 22023 invalid argument: durations, on the normalised interval.
SELECT * FROM idem_begin('scope', 'd', ttl => '0');
SELECT * FROM idem_begin('scope', 'd', ttl => '-1 second');
SELECT * FROM idem_begin('scope', 'd', ttl => '1 month -31 days');
SELECT * FROM idem_begin('scope', 'd', ttl => '31 days');
SELECT * FROM idem_begin('scope', 'd', ttl => '1000000 years');
SELECT * FROM idem_begin('scope', 'd', lease => '0');
SELECT * FROM idem_begin('scope', 'd', ttl => '1 minute', lease => '2 minutes');
SELECT * FROM idem_begin('scope', 'd', wait => '-1 second');
SELECT * FROM idem_begin('scope', 'd', wait => '100 days');
\if :portable
UPDATE idempotency.settings SET max_ttl = '1h';
\else
SET pg_idempotency.max_ttl = '1h';
\endif
SELECT * FROM idem_begin('scope', 'd', ttl => '2 hours');
\if :portable
UPDATE idempotency.settings SET max_ttl = DEFAULT;
\else
RESET pg_idempotency.max_ttl;
\endif

-- 22023 invalid argument: policy words.
SELECT * FROM idem_begin('scope', 'd', on_cache_hit => 'RETURN_CACHED');
SELECT * FROM idem_begin('scope', 'd', on_mismatch => 'maybe');

-- 22023 invalid argument: completion arguments.
SELECT * FROM idem_complete('scope', 'k', NULL, '{}');
SELECT * FROM idem_complete('scope', 'k', 1, '{}', succeeded => NULL);
SELECT * FROM idem_extend('scope', 'k', NULL);
SELECT * FROM idem_lookup('scope', NULL);
SELECT * FROM idem_forget('', 'k');

-- None of the above wrote anything.
SELECT count(*) AS rows FROM idem_lookup('scope', 'd');

-- IK004 response too large: checked before the record is touched.
SELECT fence AS f FROM idem_begin('big', 'b1') \gset
\if :portable
UPDATE idempotency.settings SET max_response_bytes = 64;
\else
SET pg_idempotency.max_response_bytes = 64;
\endif
SELECT * FROM idem_complete('big', 'b1', :f, jsonb_build_object('data', repeat('x', 100)));
SELECT state, response FROM idem_lookup('big', 'b1');
SELECT state FROM idem_complete('big', 'b1', :f, '{"small": true}');
\if :portable
UPDATE idempotency.settings SET max_response_bytes = DEFAULT;
\else
RESET pg_idempotency.max_response_bytes;
\endif

-- IK003 lease lost: a fence that never held the record, a negative one, an absent key,
-- a released record, a completed record released or extended.
SELECT fence AS f FROM idem_begin('held', 'h1') \gset
SELECT * FROM idem_complete('held', 'h1', :f + 1000, '{}');
SELECT * FROM idem_complete('held', 'h1', -1, '{}');
SELECT * FROM idem_complete('held', 'nobody', 1, '{}');
SELECT idem_release('held', 'h1', :f);
SELECT idem_release('held', 'h1', :f);
SELECT * FROM idem_complete('held', 'h1', :f, '{}');
SELECT fence AS f FROM idem_begin('held', 'h2') \gset
SELECT state FROM idem_complete('held', 'h2', :f, '{}');
SELECT idem_release('held', 'h2', :f);
SELECT * FROM idem_extend('held', 'h2', :f);
SELECT state, response FROM idem_lookup('held', 'h2');

-- An error inside a transaction rolls back what the transaction did.
BEGIN;
SELECT outcome FROM idem_begin('tx', 't1');
SELECT * FROM idem_begin('tx', 't1', ttl => '-1 hour');
ROLLBACK;
SELECT count(*) AS rows FROM idem_lookup('tx', 't1');
