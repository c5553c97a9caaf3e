-- As the extension (pg_idempotency/src/begin_batch.rs): every item is checked (its
-- fingerprint computed, its key derived) before any is decided; then the items are decided
-- in key order, so that two batches sharing keys lock them in one order, and answered in
-- item order.
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text;
    c_ttl bigint;
    c_lease bigint;
    v_keys text[];
    v_requests jsonb[];
    v_tokens uuid[];
    n integer;
    fps bytea[] := '{}';
    ks text[] := '{}';
    at integer;
    e_code text;
    e_message text;
    e_detail text;
    e_hint text;
    it record;
    items integer[] := '{}';
    answers begin_result[] := '{}';
BEGIN
    c_scope := _idem_scope(idem_begin_batch.scope, lim.max_scope_bytes);
    v_keys := _idem_items(idem_begin_batch.keys);
    v_requests := _idem_items(idem_begin_batch.requests);
    v_tokens := _idem_items(idem_begin_batch.claim_tokens);
    n := _idem_batch_items('idem_begin_batch', ARRAY['keys', 'requests', 'claim_tokens'],
        ARRAY[cardinality(v_keys), cardinality(v_requests), cardinality(v_tokens)],
        'keys and requests must not both be null', 'keys, or requests to derive them from');
    c_ttl := _idem_duration('ttl', idem_begin_batch.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_begin_batch.lease, false, lim.max_ttl_micros);
    PERFORM _idem_on_cache_hit(idem_begin_batch.on_cache_hit);
    PERFORM _idem_on_mismatch(idem_begin_batch.on_mismatch);
    IF c_lease IS NOT NULL AND c_ttl IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;

    BEGIN
        FOR i IN 1..n LOOP
            at := i;
            IF v_requests[i] IS NOT NULL THEN
                fps[i] := _idem_hash(v_requests[i]);
            END IF;
            IF v_keys[i] IS NULL THEN
                IF fps[i] IS NULL THEN
                    PERFORM _idem_fail('22023', 'key must not be null without a request',
                        'A NULL key asks for the key to be derived from the request, and no request was given.',
                        'Pass a key, or a request to derive it from (HASH_INPUT).');
                END IF;
                ks[i] := encode(fps[i], 'hex');
            ELSE
                ks[i] := _idem_key(v_keys[i], lim.max_key_bytes);
            END IF;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS e_code = RETURNED_SQLSTATE, e_message = MESSAGE_TEXT,
            e_detail = PG_EXCEPTION_DETAIL, e_hint = PG_EXCEPTION_HINT;
        PERFORM _idem_fail(e_code, e_message, format('Item %s of the batch: %s', at, e_detail), e_hint);
    END;

    FOR it IN SELECT s AS i FROM generate_series(1, n) AS s ORDER BY ks[s] COLLATE "C", s LOOP
        items := items || it.i;
        answers := answers || _idem_begin_one(c_scope, ks[it.i], NULL, fps[it.i],
            idem_begin_batch.ttl, idem_begin_batch.lease, idem_begin_batch.on_cache_hit,
            idem_begin_batch.on_mismatch, '0', v_tokens[it.i], NULL, true);
    END LOOP;
    PERFORM _idem_count(_idem_caller(), c_scope,
        count(*) FILTER (WHERE a.outcome = 'claimed'), count(*) FILTER (WHERE a.outcome = 'replay'),
        count(*) FILTER (WHERE a.outcome = 'in_progress'),
        count(*) FILTER (WHERE a.outcome = 'mismatch'), count(*) FILTER (WHERE a.outcome = 'refused'),
        0, 0)
    FROM unnest(answers) AS a;
    RETURN QUERY
        SELECT items[s], (answers[s]).outcome, (answers[s]).fence, (answers[s]).attempt,
               (answers[s]).recovered, (answers[s]).upstream_key, (answers[s]).succeeded,
               (answers[s]).response, (answers[s]).lease_until, (answers[s]).expires_at,
               (answers[s]).retry_after, (answers[s]).key
        FROM generate_subscripts(items, 1) AS s
        ORDER BY items[s];
END
