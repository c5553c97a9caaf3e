-- pg_idempotency 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- Hand-written; fixed once 0.2.0 is released. tests/tests/upgrade.rs installs 0.1.0 (its
-- script as released: sql/released/), updates, and compares every object with a fresh
-- 0.2.0 install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- idem_metrics() gains the column note: why the outcome counters are NULL. A function's
-- result columns cannot change in place: drop, create, comment and grant again, in this
-- script's one transaction.
DROP FUNCTION @extschema@.idem_metrics();
CREATE FUNCTION @extschema@.idem_metrics()
RETURNS TABLE (
    scope              text,
    in_progress        bigint,
    succeeded          bigint,
    failed             bigint,
    lapsed             bigint,
    expired            bigint,
    oldest_in_progress interval,
    claimed_total      bigint,
    replay_total       bigint,
    in_progress_total  bigint,
    mismatch_total     bigint,
    note               text)
VOLATILE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t),
    stored AS (
        SELECT r.scope,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t) AS expired,
               now.t - min(r.created_at) FILTER (WHERE r.expires_at > now.t
                                                  AND r.state = 'in_progress') AS oldest_in_progress
        FROM idempotency.records r, now
        GROUP BY r.scope, now.t),
    counted AS (SELECT * FROM idempotency._idem_counters())
    SELECT coalesce(s.scope, c.scope),
           coalesce(s.in_progress, 0), coalesce(s.succeeded, 0), coalesce(s.failed, 0),
           coalesce(s.lapsed, 0), coalesce(s.expired, 0), s.oldest_in_progress,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.claimed, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.replay, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.in_progress, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.mismatch, 0) END,
           CASE WHEN NOT idempotency._idem_counting() THEN
               'outcome counters are off: pg_idempotency is not in shared_preload_libraries (add it and restart the server)'
           END
    FROM stored s FULL JOIN counted c ON c.scope = s.scope
    ORDER BY 1
$fn$;
COMMENT ON FUNCTION @extschema@.idem_metrics() IS
    'Per scope: live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and outcome counters since the server started (note says why they are NULL)';
REVOKE EXECUTE ON FUNCTION @extschema@.idem_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_metrics() TO idempotency_admin;
