-- idem_metrics: per scope, the stored records by state. (The outcome counters live in the
-- extension's shared memory: counters.sql, extension only.)
\set VERBOSITY verbose
\set SHOW_CONTEXT never
SELECT 'metrics-' || md5(clock_timestamp()::text) AS s \gset

SELECT count(*) AS scopes FROM idem_metrics() WHERE scope = :'s';
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 2}');
SELECT state FROM idem_complete(:'s', 'a', (SELECT fence FROM idem_lookup(:'s', 'a')), '{}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT fence AS f FROM idem_begin(:'s', 'b') \gset
SELECT state FROM idem_complete(:'s', 'b', :f, '{}', succeeded => false, cache_failure => true);
SELECT outcome FROM idem_begin(:'s', 'c', lease => '100 ms');
SELECT outcome FROM idem_begin(:'s', 'd', ttl => '100 ms', unresolved_ttl => '1 microsecond');
-- Until c's lease has lapsed and d has expired (its lease is its ttl), as they say.
SELECT pg_sleep_until(max(r.lease_until) + interval '1 ms') AS lapsed
FROM unnest(ARRAY['c', 'd']) k, idem_lookup(:'s', k) r;
SELECT outcome FROM idem_begin(:'s', 'e');

SELECT in_progress, succeeded, failed, lapsed, expired,
       oldest_in_progress > '0.1 s' AS oldest_is_c
FROM idem_metrics() WHERE scope = :'s';

-- An alert on stuck calls: claims whose lease lapsed with nobody taking them over.
SELECT lapsed FROM idem_metrics() WHERE lapsed > 0 AND scope = :'s';
