-- idem_purge_expired: deletes the rows of expired records, batch by batch; never a live one.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- 250 records that expire at once, 20 live claims, 10 live results, and 5 claims whose
-- lease lapsed but whose ttl has not: all of those but the first 250 are live.
SELECT count(*) FROM (SELECT idem_begin('purge', 'gone-' || g, ttl => '100 ms', lease => '100 ms', unresolved_ttl => '1 microsecond') FROM generate_series(1, 250) g) x;
SELECT count(*) FROM (SELECT idem_begin('purge', 'live-' || g) FROM generate_series(1, 20) g) x;
SELECT count(*) FROM (SELECT idem_complete('purge', 'live-' || g,
                                           (SELECT fence FROM idem_lookup('purge', 'live-' || g)), '{}')
                      FROM generate_series(1, 10) g) x;
SELECT count(*) FROM (SELECT idem_begin('purge', 'lapsed-' || g, lease => '100 ms') FROM generate_series(1, 5) g) x;
-- Until the last of the 250 has expired and the 5 leases have lapsed, as the records say
-- (a gone- record's lease is its ttl; one that already expired is no longer shown).
SELECT pg_sleep_until(max(r.lease_until) + interval '1 ms') AS lapsed
FROM (SELECT 'gone-' || g FROM generate_series(1, 250) g
      UNION ALL SELECT 'lapsed-' || g FROM generate_series(1, 5) g) k(key),
     idem_lookup('purge', k.key) r;
SELECT scope, in_progress, succeeded, lapsed, expired FROM idem_metrics() WHERE scope = 'purge';

-- Small batches: every expired row, and only those.
-- (Other files' expired records are purged too: the count is at least ours, and exactly
-- the rows that went.)
SELECT count(*) AS stored FROM idempotency.records \gset
SELECT idem_purge_expired(batch_size => 7) AS purged \gset
SELECT :purged >= 250 AS purged_ours, count(*) = :stored - :purged AS purged_what_it_counted
FROM idempotency.records;
SELECT scope, in_progress, succeeded, lapsed, expired FROM idem_metrics() WHERE scope = 'purge';
-- A lapsed lease is not an expired record: its holder may still complete.
SELECT state FROM idem_complete('purge', 'lapsed-1', (SELECT fence FROM idem_lookup('purge', 'lapsed-1')), '{}');

-- batch_size must be positive (22023).
SELECT idem_purge_expired(0);
SELECT idem_purge_expired(-5);
