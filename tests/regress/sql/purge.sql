-- idem_purge_expired: deletes the rows of expired records, batch by batch; never a live one.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- 250 records that expire at once, 20 live claims, 10 live results, and 5 claims whose
-- lease lapsed but whose ttl has not: all of those but the first 250 are live.
SELECT count(*) FROM (SELECT idem_begin('purge', 'gone-' || g, ttl => '100 ms', lease => '100 ms') FROM generate_series(1, 250) g) x;
SELECT count(*) FROM (SELECT idem_begin('purge', 'live-' || g) FROM generate_series(1, 20) g) x;
SELECT count(*) FROM (SELECT idem_complete('purge', 'live-' || g,
                                           (SELECT fence FROM idem_lookup('purge', 'live-' || g)), '{}')
                      FROM generate_series(1, 10) g) x;
SELECT count(*) FROM (SELECT idem_begin('purge', 'lapsed-' || g, lease => '100 ms') FROM generate_series(1, 5) g) x;
SELECT pg_sleep(0.2);
SELECT scope, in_progress, succeeded, lapsed, expired FROM idem_metrics() WHERE scope = 'purge';

-- Small batches: every expired row, and only those.
-- (Other files' expired records are purged too: the count is at least ours.)
SELECT idem_purge_expired(batch_size => 7) >= 250 AS purged_ours;
SELECT scope, in_progress, succeeded, lapsed, expired FROM idem_metrics() WHERE scope = 'purge';
-- A lapsed lease is not an expired record: its holder may still complete.
SELECT state FROM idem_complete('purge', 'lapsed-1', (SELECT fence FROM idem_lookup('purge', 'lapsed-1')), '{}');

-- batch_size must be positive (22023).
SELECT idem_purge_expired(0);
SELECT idem_purge_expired(-5);
