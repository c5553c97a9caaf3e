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
    v_keys := idempotency._idem_items(idem_complete_batch.keys);
    v_fences := idempotency._idem_items(idem_complete_batch.fences);
    v_responses := idempotency._idem_items(idem_complete_batch.responses);
    v_succeeded := idempotency._idem_items(idem_complete_batch.succeeded);
    v_cache := idempotency._idem_items(idem_complete_batch.cache_failure);
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
    v_keys := idempotency._idem_padded(v_keys, n);
    v_fences := idempotency._idem_padded(v_fences, n);
    v_responses := idempotency._idem_padded(v_responses, n);
    v_succeeded := idempotency._idem_padded(v_succeeded, n);
    v_cache := idempotency._idem_padded(v_cache, n);
    RETURN QUERY
        SELECT b.* FROM idempotency._idem_complete_batch_split(
            ARRAY(SELECT i FROM pg_catalog.generate_series(1, n) AS i ORDER BY i),
            idem_complete_batch.scope, v_keys, v_fences, v_responses, v_succeeded, v_cache) AS b
        ORDER BY b.item;
END
