-- pg_idempotency: storage (schema, tables, fences, roles, result types). The functions
-- follow in functions.sql.
--
-- Hygiene: nothing below depends on the installer's search_path; the storage schema is
-- created plainly, so a schema of that name made by someone else makes the install fail
-- instead of being adopted.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE SCHEMA idempotency;
REVOKE ALL ON SCHEMA idempotency FROM PUBLIC;
COMMENT ON SCHEMA idempotency IS
    'pg_idempotency storage: reached only through the idem_* functions';

-- Fences for every claim of every key. Never cycles, so a fence is never handed out twice.
CREATE SEQUENCE idempotency.fence_seq AS bigint NO CYCLE;
COMMENT ON SEQUENCE idempotency.fence_seq IS 'pg_idempotency fencing tokens';

CREATE TABLE idempotency.records (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    state        text        NOT NULL
                 CHECK (state IN ('in_progress', 'succeeded', 'failed')),
    fence        bigint      NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt > 0),
    fingerprint  bytea,
    upstream_key uuid        NOT NULL,
    response     jsonb,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz,
    lease_until  timestamptz,
    expires_at   timestamptz NOT NULL,
    ttl          interval    NOT NULL,
    owner        regrole     NOT NULL,
    -- The claim holding the record: the caller's token for that attempt (a repeat of the
    -- same idem_begin gets the claim back) and whether it took over a lapsed lease.
    claim_token  uuid,
    recovered    boolean     NOT NULL DEFAULT false,
    -- When the running attempt claimed (a takeover's own time): retry_after counts the
    -- running call's time from it. NULL for records claimed before 0.5.0.
    claimed_at   timestamptz,
    -- Until when a record whose outcome is unknown is kept past its ttl (expires_at): a
    -- claim's lease end plus its unresolved bound (a lapsed claim is then taken over, never
    -- claimed afresh), or a mark's completion plus that bound. NULL for a result, and for
    -- records claimed before 0.8.0. A record is live while either time is ahead.
    unresolved_until timestamptz,
    -- The length of the lease the holder last took (its claim, a takeover, its last
    -- idem_extend): with less than a third of it left, the holder has stopped beating
    -- (the client's heartbeat renews every third), and a duplicate is told the lease's time
    -- left and ends its wait. NULL for records claimed before 0.9.0.
    lease_length interval,
    -- Each role its own key space: the same scope and key under two roles are two calls.
    PRIMARY KEY (scope, key, owner)
) WITH (
    -- Room on each page for a record's completion to be a HOT update (no index is
    -- touched: the only index is the key's, which never changes).
    fillfactor = 80,
    -- Purges delete in bulk and keys churn: vacuum early so freed space is reused
    -- before the table grows.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    -- A vacuum of this table must finish before the next ttl's worth of rows expires.
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE idempotency.records IS
    'pg_idempotency: one row per (scope, key, owner); expired rows are absent whether purged or not';

-- Per-scope defaults, set with idem_set_policy: a call's arguments override them, and they
-- override the GUC defaults. A NULL field leaves that setting to the defaults.
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

CREATE TABLE idempotency.policies (
    scope          text        PRIMARY KEY,
    ttl            interval,
    lease          interval,
    on_cache_hit   text        CHECK (on_cache_hit IN ('return_cached', 'return_cached_if_success', 'fail_fast')),
    cache_failures boolean,
    on_mismatch    text        CHECK (on_mismatch IN ('reject', 'ignore')),
    updated_at     timestamptz NOT NULL,
    updated_by     regrole     NOT NULL,
    -- How long past its ttl a record of the scope whose outcome is unknown is kept (0.8.0).
    unresolved_ttl interval
);
COMMENT ON TABLE idempotency.policies IS 'pg_idempotency: per-scope defaults';

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

-- Records, policies and fences come back with pg_dump / pg_restore.
SELECT pg_catalog.pg_extension_config_dump('idempotency.policies', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.records', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.fence_seq', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.counts', '');

-- Roles that the docs name: members of idempotency_user may call the API on their own
-- records; members of idempotency_admin may also see and forget every role's records,
-- read every role's metrics, purge and set policies. Roles
-- belong to the cluster, not to one database, so they are created only where missing and
-- outlive the extension.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'idempotency_user') THEN
        CREATE ROLE idempotency_user NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'idempotency_admin') THEN
        CREATE ROLE idempotency_admin NOLOGIN IN ROLE idempotency_user;
    END IF;
END
$roles$;

-- Result rows are named composite types rather than OUT parameters: PostgreSQL builds the
-- row type of a call in FROM from the type cache then, not from the function's argument
-- arrays on every execution (about 4 us a call, measured in docs/benchmarks.md).
CREATE TYPE idempotency.begin_result AS (
    outcome      text,
    fence        bigint,
    attempt      integer,
    recovered    boolean,
    upstream_key uuid,
    succeeded    boolean,
    response     jsonb,
    lease_until  timestamptz,
    expires_at   timestamptz,
    retry_after  interval,
    key          text);
COMMENT ON TYPE idempotency.begin_result IS 'What idem_begin answers';
CREATE TYPE idempotency.complete_result AS (state text, expires_at timestamptz);
COMMENT ON TYPE idempotency.complete_result IS 'What idem_complete answers';
CREATE TYPE idempotency.extend_result AS (lease_until timestamptz, expires_at timestamptz);
COMMENT ON TYPE idempotency.extend_result IS 'What idem_extend answers';
CREATE TYPE idempotency.lookup_result AS (
    scope        text,
    key          text,
    state        text,
    fence        bigint,
    attempt      integer,
    fingerprint  bytea,
    upstream_key uuid,
    response     jsonb,
    created_at   timestamptz,
    completed_at timestamptz,
    lease_until  timestamptz,
    expires_at   timestamptz,
    ttl          interval,
    owner        regrole);
COMMENT ON TYPE idempotency.lookup_result IS 'A record as idem_lookup shows it';

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

-- End of the result types (the PL/Proxy layer declares them too; what follows is the
-- partitions' own).

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
