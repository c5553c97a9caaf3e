-- The completion is _idem_complete_one's (sql/src/claims.sql), shared with
-- idem_complete_batch. A completion with the client's mark (unrecorded, outcome_unknown)
-- is counted.
DECLARE
    done record;
    res complete_result;
BEGIN
    done := _idem_complete_one(idem_complete.scope, idem_complete.key, idem_complete.fence,
        idem_complete.response, idem_complete.succeeded, idem_complete.cache_failure, false);
    IF _idem_mark(idem_complete.response) IS NOT NULL THEN
        PERFORM _idem_count(_idem_caller(), idem_complete.scope, 0, 0, 0, 0, 0,
            (_idem_mark(idem_complete.response) = 'unrecorded')::integer,
            (_idem_mark(idem_complete.response) = 'outcome_unknown')::integer);
    END IF;
    res.state := done.state;
    res.expires_at := done.expires_at;
    RETURN res;
END
