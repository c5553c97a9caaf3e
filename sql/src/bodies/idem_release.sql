#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_release.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_release.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_release.fence);
    held record;
    written integer;
BEGIN
    FOR race IN 1..1000 LOOP
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, clock_timestamp());
        IF held.state <> 'in_progress' THEN
            PERFORM _idem_lease_lost(
                'The call was already completed; idem_forget removes a stored result.');
        END IF;
        PERFORM _idem_durable_commit();
        DELETE FROM records AS r
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            RETURN;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
