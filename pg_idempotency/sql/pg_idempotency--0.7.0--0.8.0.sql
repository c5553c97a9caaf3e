-- pg_idempotency 0.7.0 -> 0.8.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- Each change is one block below, opened by a `-- 0.8.0: <what it does>` line.
-- Hand-written; fixed once 0.8.0 is released. tests/tests/consistency/upgrade.rs installs
-- each released version, fills it, updates, and compares every object with a fresh 0.8.0
-- install.
SET LOCAL search_path = pg_catalog, pg_temp;

-- 0.8.0: unresolved records outlive their ttl; operators list and resolve them (audited)
-- A record whose outcome is unknown (a claim whose lease lapsed, a record holding one of
-- the client's marks) is kept past its ttl until an operator resolves it or its unresolved
-- bound passes (idem_begin's unresolved_ttl, else pg_idempotency.unresolved_ttl, 7 days):
-- records gains unresolved_until and policies unresolved_ttl (last; idem_set_policy takes
-- it, idem_policies shows it); the claims in progress and the marks stored at the
-- update get a bound of 7 days, so a crash from before the update is kept too.
ALTER TABLE idempotency.records ADD COLUMN unresolved_until timestamptz;

ALTER TABLE idempotency.policies ADD COLUMN unresolved_ttl interval;

-- Who resolved which unresolved record, when, how, and the record as it stood before
-- (idem_resolve): read through idem_resolutions.
CREATE TABLE idempotency.resolutions (
    resolved_at  timestamptz NOT NULL,
    resolved_by  regrole     NOT NULL,
    action       text        NOT NULL
                 CHECK (action IN ('succeeded', 'failed', 'release', 'forget')),
    owner        regrole     NOT NULL,
    scope        text        NOT NULL,
    key          text        NOT NULL,
    fence        bigint      NOT NULL,
    state        text        NOT NULL,
    why          text        NOT NULL,
    attempt      integer     NOT NULL,
    upstream_key uuid        NOT NULL,
    response     jsonb
);
COMMENT ON TABLE idempotency.resolutions IS
    'pg_idempotency: who resolved an unresolved record, when, how, and the record before';

CREATE TYPE idempotency.unresolved_record AS (
    owner        regrole,
    scope        text,
    key          text,
    state        text,
    why          text,
    fence        bigint,
    attempt      integer,
    upstream_key uuid,
    since        timestamptz,
    until        timestamptz,
    response     jsonb);
COMMENT ON TYPE idempotency.unresolved_record IS 'A record awaiting an operator''s decision, as idem_unresolved lists it';

-- Whether a stored response is one of the client's marks (client/src/marks.rs): an object
-- whose only member pg_idempotency holds a string `outcome_unknown` (an earlier attempt may
-- have had its effect, the tool refused to run again) or `unrecorded` (the effect happened,
-- its result was not stored). Such a record's outcome is unknown to its callers.
CREATE FUNCTION idempotency._idem_mark(response jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN CASE WHEN pg_catalog.jsonb_typeof(response) = 'object'
                 AND (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(response)) = 1
            THEN CASE WHEN pg_catalog.jsonb_typeof(response -> 'pg_idempotency' -> 'unrecorded') = 'string'
                      THEN 'unrecorded'
                      WHEN pg_catalog.jsonb_typeof(response -> 'pg_idempotency' -> 'outcome_unknown') = 'string'
                      THEN 'outcome_unknown' END END;

UPDATE idempotency.records
SET unresolved_until = CASE WHEN state = 'in_progress' THEN lease_until ELSE completed_at END
    + interval '7 days'
WHERE (state = 'in_progress' AND lease_until IS NOT NULL)
   OR (completed_at IS NOT NULL AND idempotency._idem_mark(response) IS NOT NULL);

-- The operators' helpers for records whose outcome is unknown (docs/reliability.md, "An
-- unknown outcome"): idem_unresolved lists them, idem_resolve settles one and writes who
-- did what into resolutions, idem_resolutions reads that back.

-- Why a live record awaits an operator at `now`, or NULL when it does not: its claim's
-- lease lapsed (its holder's outcome is unknown), or it holds one of the client's marks.
CREATE FUNCTION idempotency._idem_unresolved_why(
    state text, lease_until timestamptz, response jsonb, now timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, idempotency, pg_temp
RETURN CASE WHEN state = 'in_progress' THEN
                CASE WHEN lease_until <= now THEN 'lease_lapsed' END
            ELSE idempotency._idem_mark(response) END;

-- Whose records an operator function acts on: `named`'s when the caller is that role or
-- has the privileges of idempotency_admin; NULL named: every owner's (NULL) for an admin
-- listing, else the caller's own (never a grant role's). The words are idem_lookup's.
CREATE FUNCTION idempotency._idem_operator_owner(named regrole, every boolean)
RETURNS regrole
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, idempotency, pg_temp AS $fn$
DECLARE
    caller regrole := CASE WHEN pg_catalog.current_setting('role') = 'none'
                           THEN pg_catalog.quote_ident(session_user)::regrole
                           ELSE pg_catalog.quote_ident(pg_catalog.current_setting('role'))::regrole END;
    admin boolean := pg_catalog.pg_has_role(caller::oid, 'idempotency_admin', 'USAGE');
BEGIN
    IF named IS NOT NULL AND (named = caller OR admin) THEN
        RETURN named;
    END IF;
    IF named IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'only members of idempotency_admin may see or resolve another role''s records',
            DETAIL = pg_catalog.format('The call named owner %s; the calling role is %s.', named, caller),
            HINT = 'Leave owner NULL to act on your own records, or grant idempotency_admin.';
    END IF;
    IF every AND admin THEN
        RETURN NULL;
    END IF;
    IF caller::text IN ('idempotency_user', 'idempotency_admin') THEN
        RAISE EXCEPTION USING ERRCODE = 'IK006',
            MESSAGE = 'a grant role cannot own idempotency records',
            DETAIL = pg_catalog.format('The call was made as %s, which every role granted it may become with SET ROLE: its records would be shared by all of them.', caller),
            HINT = 'Call as the application''s own role, or name the owner as a member of idempotency_admin.';
    END IF;
    RETURN caller;
END
$fn$;

-- idem_unresolved's rows: the live records of `owner` (NULL: as _idem_operator_owner
-- decides) that await a decision, oldest first.
CREATE FUNCTION idempotency._idem_unresolved_rows(owner regrole)
RETURNS SETOF idempotency.unresolved_record
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, idempotency, pg_temp AS $fn$
DECLARE
    whose regrole := _idem_operator_owner(_idem_unresolved_rows.owner, true);
    now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT u.owner, u.scope, u.key, u.state, u.why, u.fence, u.attempt, u.upstream_key,
           u.since, u.until, u.response
    FROM (SELECT r.owner, r.scope, r.key, r.state,
                 _idem_unresolved_why(r.state, r.lease_until, r.response, now) AS why,
                 r.fence, r.attempt, r.upstream_key,
                 coalesce(r.lease_until, r.completed_at) AS since,
                 greatest(r.expires_at, r.unresolved_until) AS until, r.response
          FROM records AS r
          WHERE (whose IS NULL OR r.owner = whose)
            AND (r.expires_at > now OR r.unresolved_until > now)) AS u
    WHERE u.why IS NOT NULL
    ORDER BY u.since, u.owner::text, u.scope, u.key;
END
$fn$;

-- idem_resolve's work: the record `fence` holds in `state`, still awaiting a decision, is
-- settled by `action` (succeeded or failed: the result the operator found is recorded;
-- release or forget: the record is removed, so the next call runs), and the resolution is
-- written to resolutions in the same transaction. A record that changed since it was
-- listed (completed, taken over, forgotten, expired) is refused with IK003, unchanged.
CREATE FUNCTION idempotency._idem_resolve_one(
    scope text, key text, fence bigint, state text, action text, response jsonb,
    owner regrole)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, idempotency, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
    whose regrole;
    r records%ROWTYPE;
    why text;
    now timestamptz := pg_catalog.clock_timestamp();
    limit_bytes bigint := pg_catalog.pg_size_bytes(pg_catalog.current_setting('pg_idempotency.max_response_bytes'));
    bytes bigint;
BEGIN
    IF _idem_resolve_one.scope IS NULL OR _idem_resolve_one.key IS NULL
       OR _idem_resolve_one.fence IS NULL OR _idem_resolve_one.state IS NULL
       OR _idem_resolve_one.action IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'scope, key, fence, state and action must not be null',
            DETAIL = 'A resolution names the record as idem_unresolved listed it (scope, key, fence, state) and what to do.',
            HINT = 'Pass the row''s scope, key, fence and state, and action succeeded, failed, release or forget.';
    END IF;
    IF pg_catalog.octet_length(_idem_resolve_one.scope) > 2048
       OR pg_catalog.octet_length(_idem_resolve_one.key) > 2048 THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'scope or key is too long',
            DETAIL = 'No record has a scope or key longer than 2048 bytes.',
            HINT = 'Pass the scope and key idem_unresolved listed.';
    END IF;
    IF _idem_resolve_one.state NOT IN ('in_progress', 'succeeded', 'failed') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unknown state',
            DETAIL = pg_catalog.format('state is %L; a record is in_progress, succeeded or failed.', pg_catalog.left(_idem_resolve_one.state, 64)),
            HINT = 'Pass the state idem_unresolved listed.';
    END IF;
    IF _idem_resolve_one.action NOT IN ('succeeded', 'failed', 'release', 'forget') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'unknown action',
            DETAIL = pg_catalog.format('action is %L.', pg_catalog.left(_idem_resolve_one.action, 64)),
            HINT = 'Pass succeeded or failed (with the result found), release (the call runs again) or forget.';
    END IF;
    IF _idem_resolve_one.action IN ('release', 'forget') AND _idem_resolve_one.response IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'a release or forget stores no response',
            DETAIL = pg_catalog.format('action %s removes the record; a response was given.', _idem_resolve_one.action),
            HINT = 'Pass response only with succeeded or failed.';
    END IF;
    IF _idem_mark(_idem_resolve_one.response) IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'a resolution records a result, not a mark',
            DETAIL = 'The response is one of the client''s marks: the outcome would stay unknown.',
            HINT = 'Pass the result found, or release or forget the record.';
    END IF;
    IF _idem_resolve_one.response IS NOT NULL THEN
        bytes := pg_catalog.pg_column_size(_idem_resolve_one.response::text::jsonb) - 4;
        IF bytes > limit_bytes THEN
            RAISE EXCEPTION USING ERRCODE = 'IK004', MESSAGE = 'response is too large',
                DETAIL = pg_catalog.format('The response takes %s bytes as jsonb; the limit is %s.', bytes, limit_bytes),
                HINT = 'Store a smaller response (a reference to the result instead of the result), or raise pg_idempotency.max_response_bytes.';
        END IF;
    END IF;
    whose := _idem_operator_owner(_idem_resolve_one.owner, false);

    SELECT * INTO r FROM records AS x
    WHERE x.scope = _idem_resolve_one.scope AND x.key = _idem_resolve_one.key AND x.owner = whose
    FOR UPDATE;
    IF FOUND AND (r.expires_at > now OR r.unresolved_until > now) THEN
        why := _idem_unresolved_why(r.state, r.lease_until, r.response, now);
    END IF;
    IF why IS NULL OR r.fence <> _idem_resolve_one.fence OR r.state <> _idem_resolve_one.state THEN
        RAISE EXCEPTION USING ERRCODE = 'IK003',
            MESSAGE = 'the record changed since it was listed',
            DETAIL = CASE
                WHEN NOT FOUND OR NOT (r.expires_at > now OR r.unresolved_until > now)
                    THEN 'The key has no live record: it was completed and expired, released, forgotten or resolved.'
                WHEN r.fence <> _idem_resolve_one.fence
                    THEN pg_catalog.format('The record is held under fence %s, not %s: the call was taken over or claimed again.', r.fence, _idem_resolve_one.fence)
                WHEN r.state <> _idem_resolve_one.state
                    THEN pg_catalog.format('The record is %s, not %s.', r.state, _idem_resolve_one.state)
                ELSE pg_catalog.format('The record is %s and awaits no decision: its lease is live or its result is known.', r.state) END,
            HINT = 'List it again with idem_unresolved and decide on what it holds now.';
    END IF;

    IF pg_catalog.current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'on', true);
    END IF;
    INSERT INTO resolutions (resolved_at, resolved_by, action, owner, scope, key, fence, state,
                             why, attempt, upstream_key, response)
    VALUES (now,
            CASE WHEN pg_catalog.current_setting('role') = 'none'
                 THEN pg_catalog.quote_ident(session_user)::regrole
                 ELSE pg_catalog.quote_ident(pg_catalog.current_setting('role'))::regrole END,
            _idem_resolve_one.action, r.owner, r.scope, r.key, r.fence, r.state, why, r.attempt,
            r.upstream_key, _idem_resolve_one.response);
    IF _idem_resolve_one.action IN ('succeeded', 'failed') THEN
        -- The result found, as its holder would have recorded it: replayed from now on,
        -- for the record's ttl from now.
        UPDATE records AS x
        SET state = _idem_resolve_one.action, response = _idem_resolve_one.response,
            completed_at = now, lease_until = NULL, expires_at = now + r.ttl,
            unresolved_until = NULL, claim_token = NULL
        WHERE x.scope = r.scope AND x.key = r.key AND x.owner = r.owner AND x.fence = r.fence;
        RETURN _idem_resolve_one.action;
    END IF;
    DELETE FROM records AS x
    WHERE x.scope = r.scope AND x.key = r.key AND x.owner = r.owner AND x.fence = r.fence;
    RETURN 'absent';
END
$fn$;

-- idem_resolutions' rows: the resolutions of `owner`'s records (NULL: as
-- _idem_operator_owner decides), newest first.
CREATE FUNCTION idempotency._idem_resolution_rows(owner regrole)
RETURNS SETOF idempotency.resolutions
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, idempotency, pg_temp AS $fn$
DECLARE
    whose regrole := _idem_operator_owner(_idem_resolution_rows.owner, true);
BEGIN
    RETURN QUERY
    SELECT x.* FROM resolutions AS x
    WHERE whose IS NULL OR x.owner = whose
    ORDER BY x.resolved_at DESC;
END
$fn$;

-- Internal: reached only through the API's functions.
REVOKE EXECUTE ON FUNCTION
    idempotency._idem_mark(jsonb),
    idempotency._idem_unresolved_why(text, timestamptz, jsonb, timestamptz),
    idempotency._idem_operator_owner(regrole, boolean),
    idempotency._idem_unresolved_rows(regrole),
    idempotency._idem_resolve_one(text, text, bigint, text, text, jsonb, regrole),
    idempotency._idem_resolution_rows(regrole)
FROM PUBLIC;

DROP FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid);

-- unresolved_ttl NULL: pg_idempotency.unresolved_ttl. How long past its ttl a record whose outcome is unknown (a lapsed claim, a mark) is kept for an operator.
CREATE FUNCTION @extschema@.idem_begin(
    scope          text,
    key            text,
    request        jsonb DEFAULT NULL,
    ttl            interval DEFAULT NULL,
    lease          interval DEFAULT NULL,
    on_cache_hit   text DEFAULT NULL,
    on_mismatch    text DEFAULT NULL,
    wait           interval DEFAULT '0',
    claim_token    uuid DEFAULT NULL,
    unresolved_ttl interval DEFAULT NULL)
RETURNS idempotency.begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin';
COMMENT ON FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval) IS
    'Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)';

CREATE OR REPLACE FUNCTION @extschema@.idem_metrics()
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
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t, idempotency._idem_visible_owner() AS visible),
    stored AS (
        SELECT r.owner, r.scope,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t AND COALESCE(r.unresolved_until <= now.t, true)) AS expired,
               now.t - min(r.created_at) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t)
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

-- owner NULL: the caller's own records (an admin: every owner's). Naming another role needs idempotency_admin.
CREATE FUNCTION @extschema@.idem_unresolved(
    owner regrole DEFAULT NULL)
RETURNS SETOF idempotency.unresolved_record
STABLE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 100
LANGUAGE sql AS $fn$
    SELECT * FROM idempotency._idem_unresolved_rows($1)
$fn$;
COMMENT ON FUNCTION @extschema@.idem_unresolved(regrole) IS
    'The records awaiting an operator''s decision: a claim whose lease lapsed, or a mark (outcome_unknown, unrecorded); kept past their ttl until resolved or until their unresolved bound';

-- action: succeeded or failed (record the result found), release (the next call runs again) or forget. fence and state as idem_unresolved listed them: a record that changed since is refused (IK003).
CREATE FUNCTION @extschema@.idem_resolve(
    scope    text,
    key      text,
    fence    bigint,
    state    text,
    action   text,
    response jsonb DEFAULT NULL,
    owner    regrole DEFAULT NULL)
RETURNS text
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT idempotency._idem_resolve_one($1, $2, $3, $4, $5, $6, $7)
$fn$;
COMMENT ON FUNCTION @extschema@.idem_resolve(text, text, bigint, text, text, jsonb, regrole) IS
    'Settle a record awaiting a decision (as idem_unresolved listed it) and write who did it into the audit; answers the state left (succeeded, failed or absent)';

-- owner NULL: the caller's own records' (an admin: every owner's).
CREATE FUNCTION @extschema@.idem_resolutions(
    owner regrole DEFAULT NULL)
RETURNS SETOF idempotency.resolutions
STABLE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 100
LANGUAGE sql AS $fn$
    SELECT * FROM idempotency._idem_resolution_rows($1)
$fn$;
COMMENT ON FUNCTION @extschema@.idem_resolutions(regrole) IS
    'The audit of idem_resolve: who resolved which record, when, how, and the record before, newest first';

DROP FUNCTION @extschema@.idem_set_policy(text, interval, interval, text, boolean, text);

-- INOUT: the policy comes back as stored (durations normalised).
CREATE FUNCTION @extschema@.idem_set_policy(
    INOUT scope          text,
    INOUT ttl            interval DEFAULT NULL,
    INOUT lease          interval DEFAULT NULL,
    INOUT on_cache_hit   text DEFAULT NULL,
    INOUT cache_failures boolean DEFAULT NULL,
    INOUT on_mismatch    text DEFAULT NULL,
    INOUT unresolved_ttl interval DEFAULT NULL,
    OUT   updated_at timestamptz,
    OUT   updated_by regrole)
RETURNS record
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_set_policy';
COMMENT ON FUNCTION @extschema@.idem_set_policy(text, interval, interval, text, boolean, text, interval) IS
    'Set (replace) the policy of a scope: the defaults every caller of that scope obeys';

DROP FUNCTION @extschema@.idem_policies();

CREATE FUNCTION @extschema@.idem_policies()
RETURNS TABLE (
    scope          text,
    ttl            interval,
    lease          interval,
    on_cache_hit   text,
    cache_failures boolean,
    on_mismatch    text,
    unresolved_ttl interval,
    updated_at     timestamptz,
    updated_by     regrole)
STABLE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, unresolved_ttl,
           updated_at, updated_by
    FROM idempotency.policies ORDER BY scope
$fn$;
COMMENT ON FUNCTION @extschema@.idem_policies() IS
    'Every scope''s policy';

REVOKE EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    @extschema@.idem_set_policy(text, interval, interval, text, boolean, text, interval),
    @extschema@.idem_policies(),
    @extschema@.idem_unresolved(regrole),
    @extschema@.idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    @extschema@.idem_resolutions(regrole)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    @extschema@.idem_unresolved(regrole),
    @extschema@.idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    @extschema@.idem_resolutions(regrole),
    @extschema@.idem_policies()
TO idempotency_user;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_set_policy(text, interval, interval, text, boolean, text, interval)
TO idempotency_admin;
-- (end of 0.8.0: unresolved records)

-- 0.8.0: outcome counts per owner and scope in the counts table, for any number of scopes
-- (each backend its own row), instead of 512 pairs in shared memory: _idem_counters goes
-- (the library answers it with no rows until this update); idem_metrics gains
-- refused_total, unrecorded_total, outcome_unknown_total and folded_scopes (last), so it is
-- made again with a fresh install's privileges and comment.
-- Outcome counts per owner and scope, for idem_metrics()'s *_total columns: durable, with
-- no bound on the number of scopes (docs/decisions.md, "Counts that never fold"). Each
-- backend adds to its own row of a scope (slot: the backend's number), so callers of one scope never
-- wait on each other's row, however long the transactions they count in.
CREATE TABLE idempotency.counts (
    owner           regrole NOT NULL,
    scope           text    NOT NULL,
    slot            integer NOT NULL,
    claimed         bigint  NOT NULL DEFAULT 0,
    replay          bigint  NOT NULL DEFAULT 0,
    in_progress     bigint  NOT NULL DEFAULT 0,
    mismatch        bigint  NOT NULL DEFAULT 0,
    refused         bigint  NOT NULL DEFAULT 0,
    unrecorded      bigint  NOT NULL DEFAULT 0,
    outcome_unknown bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, scope, slot)
) WITH (fillfactor = 70);
COMMENT ON TABLE idempotency.counts IS
    'pg_idempotency: outcome counts per owner, scope and backend, summed by idem_metrics()';
SELECT pg_catalog.pg_extension_config_dump('idempotency.counts', '');

DROP FUNCTION @extschema@.idem_metrics();
DROP FUNCTION idempotency._idem_counters();
CREATE FUNCTION @extschema@.idem_metrics()
RETURNS TABLE (
    owner                 regrole,
    scope                 text,
    in_progress           bigint,
    succeeded             bigint,
    failed                bigint,
    lapsed                bigint,
    expired               bigint,
    oldest_in_progress    interval,
    claimed_total         bigint,
    replay_total          bigint,
    in_progress_total     bigint,
    mismatch_total        bigint,
    note                  text,
    refused_total         bigint,
    unrecorded_total      bigint,
    outcome_unknown_total bigint,
    folded_scopes         bigint)
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t, idempotency._idem_visible_owner() AS visible,
                        coalesce(nullif(pg_catalog.current_setting('pg_idempotency.metrics_scope_limit', true), ''), '0')::bigint AS top,
                        coalesce(nullif(pg_catalog.current_setting('pg_idempotency.metrics_records', true), ''), '1')::integer = 1 AS scan),
    stored AS (
        SELECT r.owner, r.scope,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t AND COALESCE(r.unresolved_until <= now.t, true)) AS expired,
               now.t - min(r.created_at) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t)
                                                  AND r.state = 'in_progress') AS oldest_in_progress
        FROM idempotency.records r, now
        -- A one-time filter: with metrics_records = 0 the records are not read at all.
        WHERE coalesce(nullif(pg_catalog.current_setting('pg_idempotency.metrics_records', true), ''), '1')::integer = 1
          AND (now.visible IS NULL OR r.owner = now.visible)
        GROUP BY r.owner, r.scope, now.t),
    counted AS (
        SELECT c.owner, c.scope, sum(c.claimed)::bigint AS claimed, sum(c.replay)::bigint AS replay,
               sum(c.in_progress)::bigint AS in_progress, sum(c.mismatch)::bigint AS mismatch,
               sum(c.refused)::bigint AS refused, sum(c.unrecorded)::bigint AS unrecorded,
               sum(c.outcome_unknown)::bigint AS outcome_unknown
        FROM idempotency.counts c, now
        WHERE now.visible IS NULL OR c.owner = now.visible
        GROUP BY c.owner, c.scope),
    joined AS (
        SELECT coalesce(s.owner, c.owner) AS owner, coalesce(s.scope, c.scope) AS scope,
               CASE WHEN now.scan THEN coalesce(s.in_progress, 0) END AS in_progress, CASE WHEN now.scan THEN coalesce(s.succeeded, 0) END AS succeeded,
               CASE WHEN now.scan THEN coalesce(s.failed, 0) END AS failed, CASE WHEN now.scan THEN coalesce(s.lapsed, 0) END AS lapsed,
               CASE WHEN now.scan THEN coalesce(s.expired, 0) END AS expired, s.oldest_in_progress,
               coalesce(c.claimed, 0) AS claimed, coalesce(c.replay, 0) AS replay,
               coalesce(c.in_progress, 0) AS in_progress_total, coalesce(c.mismatch, 0) AS mismatch,
               coalesce(c.refused, 0) AS refused, coalesce(c.unrecorded, 0) AS unrecorded,
               coalesce(c.outcome_unknown, 0) AS outcome_unknown
        FROM stored s FULL JOIN counted c ON c.owner = s.owner AND c.scope = s.scope, now),
    -- With metrics_scope_limit set, the busiest pairs keep their rows; the rest of each
    -- owner fold into one row, '(other scopes)', whose folded_scopes says how many.
    ranked AS (
        SELECT j.*, now.top > 0 AND row_number() OVER (
                   ORDER BY j.claimed + j.replay + j.in_progress_total + j.mismatch + j.refused
                            + coalesce(j.in_progress + j.succeeded + j.failed + j.expired, 0) DESC,
                            j.owner::text, j.scope) > now.top AS folded
        FROM joined j, now)
    SELECT * FROM (
    SELECT owner, scope, in_progress, succeeded, failed, lapsed, expired, oldest_in_progress,
           claimed, replay, in_progress_total, mismatch, CASE WHEN NOT idempotency._idem_counting() THEN
               'this session counts no outcomes: pg_idempotency.count_outcomes = 0'
           WHEN NOT (SELECT scan FROM now) THEN
               'records not read (pg_idempotency.metrics_records = 0): their columns are NULL' END, refused, unrecorded,
           outcome_unknown, 0::bigint AS folded_scopes
    FROM ranked WHERE NOT folded
    UNION ALL
    SELECT owner, '(other scopes)', sum(in_progress)::bigint, sum(succeeded)::bigint,
           sum(failed)::bigint, sum(lapsed)::bigint, sum(expired)::bigint, max(oldest_in_progress),
           sum(claimed)::bigint, sum(replay)::bigint, sum(in_progress_total)::bigint,
           sum(mismatch)::bigint, CASE WHEN NOT idempotency._idem_counting() THEN
               'this session counts no outcomes: pg_idempotency.count_outcomes = 0'
           WHEN NOT (SELECT scan FROM now) THEN
               'records not read (pg_idempotency.metrics_records = 0): their columns are NULL' END, sum(refused)::bigint, sum(unrecorded)::bigint,
           sum(outcome_unknown)::bigint, count(*)
    FROM ranked WHERE folded
    GROUP BY owner) AS m
    ORDER BY m.owner::text, m.scope
$fn$;
COMMENT ON FUNCTION @extschema@.idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and durable outcome counts (claims, replays, running, refusals, the client''s marks); past pg_idempotency.metrics_scope_limit rows, the rest fold into ''(other scopes)'' rows that say how many they hold';
REVOKE EXECUTE ON FUNCTION @extschema@.idem_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_metrics() TO idempotency_user;
