-- The completion is _idem_complete_one's (sql/src/claims.sql), shared with
-- idem_complete_batch; it counts a completion that writes the client's mark (unrecorded,
-- outcome_unknown).
DECLARE
    done record;
    res complete_result;
BEGIN
    done := _idem_complete_one(idem_complete.scope, idem_complete.key, idem_complete.fence,
        idem_complete.response, idem_complete.succeeded, idem_complete.cache_failure, false);
    res.state := done.state;
    res.expires_at := done.expires_at;
    RETURN res;
END
