#variable_conflict use_column
DECLARE
    c_scope text := _idem_scope(idem_drop_policy.scope, (_idem_limits()).max_scope_bytes);
    written integer;
BEGIN
    DELETE FROM policies AS p WHERE p.scope = c_scope;
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written > 0;
END
