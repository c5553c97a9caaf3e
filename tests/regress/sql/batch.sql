-- Batches: each item answered as a single call would be, in the order given; a refusal is
-- the item's outcome; a bad argument anywhere fails the batch and changes nothing.
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- call-2 completed, call-4 running with a request.
SELECT state FROM idem_complete('batch_mail', 'call-2', (idem_begin('batch_mail', 'call-2')).fence, '{"email_id": 7}');
SELECT outcome FROM idem_begin('batch_mail', 'call-4', '{"to": "ann"}');

SELECT item, key, outcome, fence IS NOT NULL AS fenced, attempt, succeeded, response, retry_after IS NOT NULL AS told_when
FROM idem_begin_batch('batch_mail',
    ARRAY['call-1', 'call-2', 'call-3', 'call-4', 'call-4', 'call-1'],
    ARRAY[NULL, NULL, NULL, '{"to": "ann"}', '{"to": "bob"}', NULL]::jsonb[]);

-- A NULL key is its request's HASH_INPUT key.
SELECT item, key = encode(idem_hash('{"b": 2, "a": 1}'), 'hex') AS derived, outcome
FROM idem_begin_batch('batch_mail', ARRAY[NULL], ARRAY['{"a": 1, "b": 2}']::jsonb[]);

-- fail_fast: a repeat of a completed call is refused, as its item's outcome.
SELECT item, key, outcome FROM idem_begin_batch('batch_mail', ARRAY['call-2', 'call-5'],
    on_cache_hit => 'fail_fast');

-- Completions: item 2's fence never held call-3; an uncached failure leaves nothing.
SELECT item, key, outcome, state FROM idem_complete_batch('batch_mail',
    ARRAY['call-1', 'call-3', 'call-5'],
    ARRAY[(SELECT fence FROM idem_lookup('batch_mail', 'call-1')), -1,
          (SELECT fence FROM idem_lookup('batch_mail', 'call-5'))],
    ARRAY['{"email_id": 8}', '{"email_id": 9}', '{"error": "bounced"}']::jsonb[],
    ARRAY[true, true, false]);
SELECT key, state FROM idempotency.records WHERE scope = 'batch_mail' ORDER BY key;

-- A bad argument in any item: the whole batch fails, nothing is claimed.
SELECT * FROM idem_begin_batch('batch_mail', ARRAY['call-6', '  ']);
SELECT * FROM idem_begin_batch('batch_mail', ARRAY['call-6', NULL]);
SELECT * FROM idem_begin_batch('batch_mail', ARRAY['call-6'], ARRAY['{}', '{}']::jsonb[]);
SELECT * FROM idem_begin_batch('batch_mail', NULL);
SELECT count(*) FROM idem_begin_batch('batch_mail', (SELECT array_agg('k' || g) FROM generate_series(1, 1001) g));
SELECT count(*) AS claimed_call_6 FROM idempotency.records WHERE key = 'call-6';
SELECT * FROM idem_complete_batch('batch_mail', ARRAY['call-3'], ARRAY[NULL::bigint], ARRAY['{}']::jsonb[]);
SELECT * FROM idem_complete_batch('batch_mail', ARRAY['call-3'], ARRAY[1], NULL, ARRAY[true, false]);
-- An empty batch answers nothing.
SELECT count(*) FROM idem_begin_batch('batch_mail', '{}');
SELECT count(*) FROM idem_complete_batch('batch_mail', '{}', '{}', '{}');
