-- The claim is _idem_begin_one's (sql/src/claims.sql), shared with idem_begin_batch. Its
-- outcome is counted in the call's transaction; a refusal raised is not (docs/decisions.md,
-- "Counts that never fold").
DECLARE
    res begin_result;
BEGIN
    res := _idem_begin_one(idem_begin.scope, idem_begin.key, idem_begin.request, NULL,
        idem_begin.ttl, idem_begin.lease, idem_begin.on_cache_hit, idem_begin.on_mismatch,
        idem_begin.wait, idem_begin.claim_token, idem_begin.unresolved_ttl, false);
    PERFORM _idem_count_outcome(_idem_caller(), idem_begin.scope, res.outcome);
    RETURN res;
END
