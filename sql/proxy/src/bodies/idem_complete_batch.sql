-- The items go to their partitions through idempotency._idem_complete_batch_split (see
-- idem_begin_batch): every partition gets its items in one call, all partitions at once.
#variable_conflict use_column
DECLARE
    v_keys text[];
    v_fences bigint[];
    v_responses jsonb[];
    v_succeeded boolean[];
    v_cache boolean[];
    n integer;
BEGIN
    v_keys := CASE WHEN idem_complete_batch.keys IS NOT NULL THEN ARRAY(
        SELECT u.v FROM pg_catalog.unnest(idem_complete_batch.keys) WITH ORDINALITY AS u(v, o) ORDER BY u.o) END;
    v_fences := CASE WHEN idem_complete_batch.fences IS NOT NULL THEN ARRAY(
        SELECT u.v FROM pg_catalog.unnest(idem_complete_batch.fences) WITH ORDINALITY AS u(v, o) ORDER BY u.o) END;
    v_responses := CASE WHEN idem_complete_batch.responses IS NOT NULL THEN ARRAY(
        SELECT u.v FROM pg_catalog.unnest(idem_complete_batch.responses) WITH ORDINALITY AS u(v, o) ORDER BY u.o) END;
    v_succeeded := CASE WHEN idem_complete_batch.succeeded IS NOT NULL THEN ARRAY(
        SELECT u.v FROM pg_catalog.unnest(idem_complete_batch.succeeded) WITH ORDINALITY AS u(v, o) ORDER BY u.o) END;
    v_cache := CASE WHEN idem_complete_batch.cache_failure IS NOT NULL THEN ARRAY(
        SELECT u.v FROM pg_catalog.unnest(idem_complete_batch.cache_failure) WITH ORDINALITY AS u(v, o) ORDER BY u.o) END;
    n := idempotency._idem_batch_items('idem_complete_batch',
        ARRAY['keys', 'fences', 'responses', 'succeeded', 'cache_failure'],
        ARRAY[pg_catalog.cardinality(v_keys), pg_catalog.cardinality(v_fences),
              pg_catalog.cardinality(v_responses), pg_catalog.cardinality(v_succeeded),
              pg_catalog.cardinality(v_cache)],
        'keys must not be null', 'keys, fences and responses');
    IF n = 0 THEN
        RETURN;
    END IF;
    -- SPLIT needs one element per item in every array.
    v_keys := ARRAY(SELECT v_keys[i] FROM pg_catalog.generate_series(1, n) AS i ORDER BY i);
    v_fences := ARRAY(SELECT v_fences[i] FROM pg_catalog.generate_series(1, n) AS i ORDER BY i);
    v_responses := ARRAY(SELECT v_responses[i] FROM pg_catalog.generate_series(1, n) AS i ORDER BY i);
    v_succeeded := ARRAY(SELECT v_succeeded[i] FROM pg_catalog.generate_series(1, n) AS i ORDER BY i);
    v_cache := ARRAY(SELECT v_cache[i] FROM pg_catalog.generate_series(1, n) AS i ORDER BY i);
    RETURN QUERY
        SELECT b.* FROM idempotency._idem_complete_batch_split(
            ARRAY(SELECT i FROM pg_catalog.generate_series(1, n) AS i ORDER BY i),
            idem_complete_batch.scope, v_keys, v_fences, v_responses, v_succeeded, v_cache) AS b
        ORDER BY b.item;
END
