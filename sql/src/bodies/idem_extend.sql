#variable_conflict use_column
DECLARE
    res extend_result;
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_extend.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_extend.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_extend.fence);
    c_lease bigint := _idem_duration('lease', idem_extend.lease, false, lim.max_ttl_micros);
    held record;
    now timestamptz;
    n_lease bigint;
    n_lease_until timestamptz;
    n_expires timestamptz;
    written integer;
BEGIN
    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, now);
        IF held.state <> 'in_progress' THEN
            PERFORM _idem_lease_lost('The call was already completed; there is no lease to extend.');
        END IF;
        n_lease := _idem_effective_lease(c_lease, _idem_micros(held.policy_lease)::bigint,
                                         _idem_micros(held.ttl)::bigint);
        n_lease_until := now + _idem_interval(n_lease);
        -- A record never expires while its lease is live.
        n_expires := greatest(held.expires_at, n_lease_until);
        PERFORM _idem_durable_commit();
        -- The unresolved bound moves with the lease, by the same length; the length taken
        -- tells a duplicate whether the holder still beats.
        UPDATE records AS r SET lease_until = n_lease_until, expires_at = n_expires,
            unresolved_until = n_lease_until + (r.unresolved_until - r.lease_until),
            lease_length = _idem_interval(n_lease)
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            res.lease_until := n_lease_until;
            res.expires_at := n_expires;
            RETURN res;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
