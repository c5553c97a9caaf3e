#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text := _idem_scope(idem_forget.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_forget.key, lim.max_key_bytes);
    c_owner regrole := _idem_acting_owner(idem_forget.owner);
    now timestamptz := clock_timestamp();
    gone timestamptz;
BEGIN
    DELETE FROM records AS r WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
    RETURNING greatest(r.expires_at, r.unresolved_until) INTO gone;
    RETURN coalesce(gone > now, false);
END
