-- Extension only: idem_metrics' outcome counts, the raised mismatch included (the portable
-- variant counts what commits, so not the mismatch it raises: tests/tests/behaviour/counts.rs
-- covers both). Counts are durable, so this file uses a scope no earlier run used.
\set VERBOSITY verbose
\set SHOW_CONTEXT never
SELECT 'counters-' || md5(clock_timestamp()::text) AS s \gset

SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 2}');
SELECT state FROM idem_complete(:'s', 'a', (SELECT fence FROM idem_lookup(:'s', 'a')), '{}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'a', '{"n": 1}');
SELECT outcome FROM idem_begin(:'s', 'b');

SELECT claimed_total, replay_total, in_progress_total, mismatch_total
FROM idem_metrics() WHERE scope = :'s';
