#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_ttl bigint;
    c_lease bigint;
    c_unresolved bigint;
BEGIN
    scope := _idem_scope(idem_set_policy.scope, lim.max_scope_bytes);
    c_ttl := _idem_duration('ttl', idem_set_policy.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_set_policy.lease, false, lim.max_ttl_micros);
    IF c_ttl IS NOT NULL AND c_lease IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;
    PERFORM _idem_on_cache_hit(idem_set_policy.on_cache_hit);
    PERFORM _idem_on_mismatch(idem_set_policy.on_mismatch);
    c_unresolved := _idem_duration('unresolved_ttl', idem_set_policy.unresolved_ttl, false,
                                   lim.max_ttl_micros);
    unresolved_ttl := _idem_interval(c_unresolved);
    ttl := _idem_interval(c_ttl);
    lease := _idem_interval(c_lease);
    updated_at := clock_timestamp();
    updated_by := _idem_session_role();
    INSERT INTO policies AS p (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch,
                               updated_at, updated_by, unresolved_ttl)
    VALUES (idem_set_policy.scope, idem_set_policy.ttl, idem_set_policy.lease,
            idem_set_policy.on_cache_hit, idem_set_policy.cache_failures,
            idem_set_policy.on_mismatch, idem_set_policy.updated_at, idem_set_policy.updated_by,
            idem_set_policy.unresolved_ttl)
    ON CONFLICT (scope) DO UPDATE SET ttl = excluded.ttl, lease = excluded.lease,
        on_cache_hit = excluded.on_cache_hit, cache_failures = excluded.cache_failures,
        on_mismatch = excluded.on_mismatch, updated_at = excluded.updated_at,
        updated_by = excluded.updated_by, unresolved_ttl = excluded.unresolved_ttl;
END
