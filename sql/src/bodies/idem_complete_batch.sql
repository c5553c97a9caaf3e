-- As the extension (pg_idempotency/src/complete_batch.rs): every item is checked before any
-- is completed; then the items are completed in key order and answered in item order, a
-- lost lease as that item's outcome.
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text;
    v_keys text[];
    v_fences bigint[];
    v_responses jsonb[];
    v_succeeded boolean[];
    v_cache boolean[];
    n integer;
    ks text[] := '{}';
    at integer;
    e_code text;
    e_message text;
    e_detail text;
    e_hint text;
    it record;
    done record;
    items integer[] := '{}';
    states text[] := '{}';
    expiries timestamptz[] := '{}';
    lost boolean[] := '{}';
BEGIN
    c_scope := _idem_scope(idem_complete_batch.scope, lim.max_scope_bytes);
    v_keys := _idem_items(idem_complete_batch.keys);
    v_fences := _idem_items(idem_complete_batch.fences);
    v_responses := _idem_items(idem_complete_batch.responses);
    v_succeeded := _idem_items(idem_complete_batch.succeeded);
    v_cache := _idem_items(idem_complete_batch.cache_failure);
    n := _idem_batch_items('idem_complete_batch',
        ARRAY['keys', 'fences', 'responses', 'succeeded', 'cache_failure'],
        ARRAY[cardinality(v_keys), cardinality(v_fences), cardinality(v_responses),
              cardinality(v_succeeded), cardinality(v_cache)],
        'keys must not be null', 'keys, fences and responses');

    BEGIN
        FOR i IN 1..n LOOP
            at := i;
            ks[i] := _idem_key(v_keys[i], lim.max_key_bytes);
            PERFORM _idem_fence(v_fences[i]);
            PERFORM _idem_check_response(v_responses[i], lim.max_response_bytes);
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_code = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
        PERFORM _idem_fail(e_code, e_message, format('Item %s of the batch: %s', at, e_detail), e_hint);
    END;

    FOR it IN SELECT s AS i FROM generate_series(1, n) AS s ORDER BY ks[s] COLLATE "C", s LOOP
        -- succeeded NULL: succeeded, as a single call's default.
        done := _idem_complete_one(c_scope, ks[it.i], v_fences[it.i], v_responses[it.i],
            coalesce(v_succeeded[it.i], true), v_cache[it.i], true);
        items := items || it.i;
        states := states || done.state;
        expiries := expiries || done.expires_at;
        lost := lost || done.lost;
    END LOOP;
    RETURN QUERY
        SELECT items[s], ks[items[s]],
               CASE WHEN lost[s] THEN 'lease_lost' ELSE 'completed' END,
               states[s], expiries[s]
        FROM generate_subscripts(items, 1) AS s
        ORDER BY items[s];
END
