-- The claim is _idem_begin_one's (sql/src/claims.sql), shared with idem_begin_batch.
BEGIN
    RETURN _idem_begin_one(idem_begin.scope, idem_begin.key, idem_begin.request, NULL,
        idem_begin.ttl, idem_begin.lease, idem_begin.on_cache_hit, idem_begin.on_mismatch,
        idem_begin.wait, idem_begin.claim_token, idem_begin.unresolved_ttl, false);
END
