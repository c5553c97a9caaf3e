-- The items go to their partitions through idempotency._idem_begin_batch_split, which
-- SPLITs them by the routing hash of each item's key: every partition gets its items in one
-- call, all partitions at once. A NULL key is derived here first (as idem_begin's routing
-- derives it), so that the item meets the same call made with its key spelled out. The
-- arrays' shape is checked here, before any partition is asked; each partition checks its
-- items' values, and one partition's refusal does not undo what another has claimed (as
-- single calls through the layer, each partition commits its own part).
#variable_conflict use_column
DECLARE
    v_keys text[];
    v_requests jsonb[];
    v_tokens uuid[];
    n integer;
BEGIN
    v_keys := idempotency._idem_items(idem_begin_batch.keys);
    v_requests := idempotency._idem_items(idem_begin_batch.requests);
    v_tokens := idempotency._idem_items(idem_begin_batch.claim_tokens);
    n := idempotency._idem_batch_items('idem_begin_batch', ARRAY['keys', 'requests', 'claim_tokens'],
        ARRAY[pg_catalog.cardinality(v_keys), pg_catalog.cardinality(v_requests),
              pg_catalog.cardinality(v_tokens)],
        'keys and requests must not both be null', 'keys, or requests to derive them from');
    IF n = 0 THEN
        RETURN;
    END IF;
    -- SPLIT needs one element per item in every array.
    v_keys := ARRAY(SELECT CASE WHEN v_keys[i] IS NULL AND v_requests[i] IS NOT NULL
                                THEN pg_catalog.encode(idempotency._idem_hash(v_requests[i]), 'hex')
                                ELSE v_keys[i] END
                    FROM pg_catalog.generate_series(1, n) AS i ORDER BY i);
    v_requests := idempotency._idem_padded(v_requests, n);
    v_tokens := idempotency._idem_padded(v_tokens, n);
    RETURN QUERY
        SELECT b.* FROM idempotency._idem_begin_batch_split(
            ARRAY(SELECT i FROM pg_catalog.generate_series(1, n) AS i ORDER BY i),
            idem_begin_batch.scope, v_keys, v_requests, idem_begin_batch.ttl,
            idem_begin_batch.lease, idem_begin_batch.on_cache_hit, idem_begin_batch.on_mismatch,
            v_tokens) AS b
        ORDER BY b.item;
END
