-- pg_idempotency 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- Each role gets its own key space, idem_begin answers the key it used, and idem_metrics
-- says why its counters are NULL. Hand-written; fixed once 0.2.0 is released.
-- tests/tests/upgrade.rs installs 0.1.0 (its script as released: sql/released/), fills it,
-- updates, and compares every object with a fresh 0.2.0 install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- Records are keyed by their owner too. Every record keeps the owner that claimed it (0.1.0
-- recorded it already): after the update, a role sees and holds only the records it
-- claimed, and another role's begin of the same scope and key is a call of its own.
ALTER TABLE idempotency.records
    DROP CONSTRAINT records_pkey,
    ADD CONSTRAINT records_pkey PRIMARY KEY (scope, key, owner);
COMMENT ON TABLE idempotency.records IS
    'pg_idempotency: one row per (scope, key, owner); expired rows are absent whether purged or not';

-- idem_begin answers the key it used (derived from the request when the key is NULL): its
-- result type gains a last column. The function is made anew (a new OID), so no session
-- keeps using the old row type for it. Until this update runs, the library serves the 0.1.0
-- functions as 0.1.0 did.
DROP FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval);
ALTER TYPE idempotency.begin_result ADD ATTRIBUTE key text;
CREATE FUNCTION @extschema@.idem_begin(
    scope        text,
    key          text,
    request      jsonb    DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    lease        interval DEFAULT NULL,
    on_cache_hit text     DEFAULT NULL,
    on_mismatch  text     DEFAULT NULL,
    wait         interval DEFAULT '0')
RETURNS idempotency.begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin';
COMMENT ON FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval) IS
    'Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)';

REVOKE EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval)
TO idempotency_user;

-- idem_lookup and idem_forget act on the caller's own record, or, for idempotency_admin,
-- on the owner named by a new argument; forgetting one's own record is for every user now.
DROP FUNCTION @extschema@.idem_lookup(text, text);
DROP FUNCTION @extschema@.idem_forget(text, text);
-- owner NULL: the caller's own record. Naming another role needs idempotency_admin.
CREATE FUNCTION @extschema@.idem_lookup(scope text, key text, owner regrole DEFAULT NULL)
RETURNS SETOF idempotency.lookup_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER ROWS 1
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_lookup';
COMMENT ON FUNCTION @extschema@.idem_lookup(text, text, regrole) IS
    'The caller''s record of a call (an admin: owner''s) until it expires; no row when it is absent or expired';

CREATE FUNCTION @extschema@.idem_forget(scope text, key text, owner regrole DEFAULT NULL)
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_forget';
COMMENT ON FUNCTION @extschema@.idem_forget(text, text, regrole) IS
    'Remove the caller''s record (an admin: owner''s), e.g. a bad cached result; true when a live one was removed';

REVOKE EXECUTE ON FUNCTION
    @extschema@.idem_lookup(text, text, regrole),
    @extschema@.idem_forget(text, text, regrole)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_lookup(text, text, regrole),
    @extschema@.idem_forget(text, text, regrole)
TO idempotency_user;

-- idem_metrics() is per owner and scope (a role sees its own rows, an admin every owner's),
-- every user may call it, and its column note says why the counters are NULL. Result
-- columns cannot change in place: drop and create again, with the counters it reads.
DROP FUNCTION @extschema@.idem_metrics();
DROP FUNCTION idempotency._idem_counters();
-- Outcome counters since the server started (shared memory; only when preloaded), and
-- whose rows idem_metrics shows the caller.
CREATE FUNCTION idempotency._idem_counters()
RETURNS TABLE (owner regrole, scope text, claimed bigint, replay bigint, in_progress bigint,
               mismatch bigint)
VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_owner_counters';
-- NULL: every owner's (the caller has idempotency_admin's privileges); else the caller.
CREATE FUNCTION idempotency._idem_visible_owner()
RETURNS regrole
VOLATILE PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_visible_owner';
REVOKE ALL ON FUNCTION idempotency._idem_counters(), idempotency._idem_counting(),
    idempotency._idem_visible_owner() FROM PUBLIC;

CREATE FUNCTION @extschema@.idem_metrics()
RETURNS TABLE (
    owner              regrole,
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
    WITH now AS (SELECT clock_timestamp() AS t, idempotency._idem_visible_owner() AS visible),
    stored AS (
        SELECT r.owner, r.scope,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t) AS expired,
               now.t - min(r.created_at) FILTER (WHERE r.expires_at > now.t
                                                  AND r.state = 'in_progress') AS oldest_in_progress
        FROM idempotency.records r, now
        WHERE now.visible IS NULL OR r.owner = now.visible
        GROUP BY r.owner, r.scope, now.t),
    counted AS (
        SELECT c.* FROM idempotency._idem_counters() c, now
        WHERE now.visible IS NULL OR c.owner = now.visible)
    SELECT coalesce(s.owner, c.owner), coalesce(s.scope, c.scope),
           coalesce(s.in_progress, 0), coalesce(s.succeeded, 0), coalesce(s.failed, 0),
           coalesce(s.lapsed, 0), coalesce(s.expired, 0), s.oldest_in_progress,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.claimed, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.replay, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.in_progress, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.mismatch, 0) END,
           CASE WHEN NOT idempotency._idem_counting() THEN
               'outcome counters are off: pg_idempotency is not in shared_preload_libraries (add it and restart the server)'
           END
    FROM stored s FULL JOIN counted c ON c.owner = s.owner AND c.scope = s.scope
    ORDER BY coalesce(s.owner, c.owner)::text, 2
$fn$;
COMMENT ON FUNCTION @extschema@.idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and outcome counters since the server started (note says why they are NULL)';

REVOKE EXECUTE ON FUNCTION @extschema@.idem_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_metrics() TO idempotency_user;
