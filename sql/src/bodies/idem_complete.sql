#variable_conflict use_column
DECLARE
    res complete_result;
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_complete.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_complete.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_complete.fence);
    max_bytes bigint;
    bytes bigint;
    held record;
    cache boolean;
    new_state text;
    now timestamptz;
    written integer;
BEGIN
    IF idem_complete.response IS NOT NULL THEN
        max_bytes := lim.max_response_bytes;
        -- The size of the jsonb, uncompressed, without its header (as the extension counts);
        -- a compressed or stored value is measured on a fresh copy.
        bytes := pg_column_size(idem_complete.response) - 4;
        IF bytes + 4 > max_bytes OR pg_column_compression(idem_complete.response) IS NOT NULL THEN
            bytes := pg_column_size(idem_complete.response::text::jsonb) - 4;
        END IF;
        IF bytes > max_bytes THEN
            PERFORM _idem_fail('IK004', 'response is too large',
                format('The response takes %s bytes as jsonb; the limit is %s.', bytes, max_bytes),
                'Store a smaller response (a reference to the result instead of the result), or raise pg_idempotency.max_response_bytes.');
        END IF;
    END IF;
    IF idem_complete.succeeded IS NULL THEN
        PERFORM _idem_fail('22023', 'succeeded must not be null',
            'A completion records whether the call succeeded.',
            'Pass succeeded => true or false.');
    END IF;
    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, now);
        IF held.state <> 'in_progress' THEN
            -- Completed by this very fence before (its first reply may have been lost): keep
            -- what is stored.
            res.state := held.state;
            res.expires_at := held.expires_at;
            RETURN res;
        END IF;
        PERFORM _idem_durable_commit();
        -- The call's word, else its scope's policy; failures are not cached by default.
        cache := coalesce(idem_complete.cache_failure, held.policy_cache_failures, false);
        IF NOT idem_complete.succeeded AND NOT cache THEN
            -- An uncached failure leaves nothing behind, so a retry runs the call again.
            DELETE FROM records AS r
            WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
              AND r.state = 'in_progress';
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written = 1 THEN
                res.state := 'absent';
                RETURN res;
            END IF;
            CONTINUE;
        END IF;
        new_state := CASE WHEN idem_complete.succeeded THEN 'succeeded' ELSE 'failed' END;
        UPDATE records AS r
        SET state = new_state, response = idem_complete.response, completed_at = now,
            lease_until = NULL, expires_at = now + held.ttl
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            res.state := new_state;
            res.expires_at := now + held.ttl;
            RETURN res;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
