-- The operators' helpers for records whose outcome is unknown (docs/reliability.md, "An
-- unknown outcome"): idem_unresolved lists them, idem_resolve settles one and writes who
-- did what into resolutions, idem_resolutions reads that back.

-- Why a live record awaits an operator at `now`, or NULL when it does not: its claim's
-- lease lapsed (its holder's outcome is unknown), or it holds one of the client's marks.
CREATE FUNCTION :"storage"._idem_unresolved_why(
    state text, lease_until timestamptz, response jsonb, now timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN state = 'in_progress' THEN
                CASE WHEN lease_until <= now THEN 'lease_lapsed' END
            ELSE :"storage"._idem_mark(response) END;

-- Whose records an operator function acts on: `named`'s when the caller is that role or
-- has the privileges of idempotency_admin; NULL named: every owner's (NULL) for an admin
-- listing, else the caller's own (never a grant role's). The words are idem_lookup's.
CREATE FUNCTION :"storage"._idem_operator_owner(named regrole, every boolean)
RETURNS regrole
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
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
CREATE FUNCTION :"storage"._idem_unresolved_rows(owner regrole)
RETURNS SETOF :"storage".unresolved_record
LANGUAGE plpgsql STABLE AS $fn$
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
CREATE FUNCTION :"storage"._idem_resolve_one(
    scope text, key text, fence bigint, state text, action text, response jsonb,
    owner regrole)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    whose regrole;
    r records%ROWTYPE;
    why text;
    now timestamptz := pg_catalog.clock_timestamp();
    limit_bytes bigint := (SELECT l.max_response_bytes FROM _idem_limits() AS l);
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
CREATE FUNCTION :"storage"._idem_resolution_rows(owner regrole)
RETURNS SETOF :"storage".resolutions
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    whose regrole := _idem_operator_owner(_idem_resolution_rows.owner, true);
BEGIN
    RETURN QUERY
    SELECT x.* FROM resolutions AS x
    WHERE whose IS NULL OR x.owner = whose
    ORDER BY x.resolved_at DESC;
END
$fn$;
