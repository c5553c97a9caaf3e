-- ---------------------------------------------------------------------------------------
-- Internal helpers (_idem_*). They have no SET clause of their own, so they stay cheap;
-- they are called only from the API functions below, which pin the search_path first.
-- Names in SQL-standard bodies (RETURN ...) are bound here, at creation, through this path.
-- ---------------------------------------------------------------------------------------
SET LOCAL search_path = pg_catalog, :"storage", pg_temp;

CREATE FUNCTION :"storage"._idem_fail(code text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $fn$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$fn$;

-- The defaults (default_ttl, default_lease) are the extension's GUC names, read as custom
-- settings: unset means the extension's default, and values take the same units ('1h',
-- '64kB'). The install seeds the limits from the same names once (see settings).
CREATE FUNCTION :"storage"._idem_setting(name text, fallback bigint, unit text, lo bigint, hi bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    raw text := current_setting(name, true);
    parts text[];
    factor numeric;
    value numeric;
BEGIN
    IF raw IS NULL OR raw = '' THEN
        RETURN fallback;
    END IF;
    parts := regexp_match(raw, '^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$');
    IF parts IS NOT NULL THEN
        IF unit = 's' THEN
            factor := CASE parts[2] WHEN '' THEN 1 WHEN 's' THEN 1 WHEN 'ms' THEN 0.001
                      WHEN 'min' THEN 60 WHEN 'h' THEN 3600 WHEN 'd' THEN 86400 END;
        ELSIF unit = 'B' THEN
            factor := CASE parts[2] WHEN '' THEN 1 WHEN 'B' THEN 1 WHEN 'kB' THEN 1024
                      WHEN 'MB' THEN 1048576 WHEN 'GB' THEN 1073741824
                      WHEN 'TB' THEN 1099511627776 END;
        ELSIF parts[2] = '' THEN
            factor := 1;
        END IF;
        value := round(parts[1]::numeric * factor);
    END IF;
    IF value IS NULL OR value < lo OR value > hi THEN
        PERFORM _idem_fail('22023',
            format('invalid value for parameter "%s": "%s"', name, raw),
            format('%s takes %s from %s to %s.', name,
                   CASE unit WHEN 's' THEN 'seconds (or a unit: ms, s, min, h, d)'
                             WHEN 'B' THEN 'bytes (or a unit: B, kB, MB, GB, TB)'
                             ELSE 'a whole number' END, lo, hi),
            format('SET %s to a valid value, or RESET it.', name));
    END IF;
    RETURN value;
END
$fn$;

CREATE FUNCTION :"storage"._idem_default_ttl_micros() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_setting('pg_idempotency.default_ttl', 3600, 's', 1, 2147483647) * 1000000;
CREATE FUNCTION :"storage"._idem_default_lease_micros() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_setting('pg_idempotency.default_lease', 60, 's', 1, 2147483647) * 1000000;

-- How long past its ttl a record whose outcome is unknown is kept (a lapsed claim, a
-- mark): the extension's pg_idempotency.unresolved_ttl, 7 days unless set
-- (docs/decisions.md, "Unresolved calls outlive their ttl").
CREATE FUNCTION :"storage"._idem_default_unresolved_ttl_micros() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_setting('pg_idempotency.unresolved_ttl', 604800, 's', 1, 2147483647) * 1000000;

-- Whether a stored response is one of the client's marks (client/src/marks.rs): an object
-- whose only member pg_idempotency holds a string `outcome_unknown` (an earlier attempt may
-- have had its effect, the tool refused to run again) or `unrecorded` (the effect happened,
-- its result was not stored). Such a record's outcome is unknown to its callers.
CREATE FUNCTION :"storage"._idem_mark(response jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN pg_catalog.jsonb_typeof(response) = 'object'
                 AND (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(response)) = 1
            THEN CASE WHEN pg_catalog.jsonb_typeof(response -> 'pg_idempotency' -> 'unrecorded') = 'string'
                      THEN 'unrecorded'
                      WHEN pg_catalog.jsonb_typeof(response -> 'pg_idempotency' -> 'outcome_unknown') = 'string'
                      THEN 'outcome_unknown' END END;

-- The limits in force, read once by each API function and handed to the checks (a read per
-- check would cost a query each). No row (deleted by hand) is refused rather than read as
-- no limit at all.
CREATE FUNCTION :"storage"._idem_limits(
    OUT max_key_bytes bigint, OUT max_scope_bytes bigint, OUT max_ttl_micros bigint,
    OUT max_response_bytes bigint)
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    SELECT s.max_key_bytes, s.max_scope_bytes, _idem_micros(s.max_ttl), s.max_response_bytes
    INTO max_key_bytes, max_scope_bytes, max_ttl_micros, max_response_bytes
    FROM settings AS s;
    IF NOT FOUND THEN
        PERFORM _idem_fail('55000', 'pg_idempotency has no limits',
            'The table settings in the storage schema has no row.',
            'Its owner restores the defaults with INSERT INTO <storage>.settings DEFAULT VALUES.');
    END IF;
END
$fn$;

-- A limit set out of its range, refused as the extension refuses SET of its setting.
-- value is the limit in the unit of lo and hi (NULL: none, or an infinite interval); given
-- is how it was written.
CREATE FUNCTION :"storage"._idem_check_limit(
    name text, value numeric, given text, lo numeric, hi numeric, takes text, unit text)
RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    IF value IS NULL OR value < lo OR value > hi THEN
        PERFORM _idem_fail('22023',
            format('invalid value for %s: %s', name, coalesce(given, 'NULL')),
            format('%s takes %s from %s to %s %s.', name, takes, lo, hi, unit),
            format('Set settings.%s in the storage schema to a value in that range.', name));
    END IF;
END
$fn$;

-- Checks the limits as they are written (by the install, an upgrade or their owner).
CREATE FUNCTION :"storage"._idem_check_settings() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, :"storage", pg_temp AS $fn$
BEGIN
    PERFORM _idem_check_limit('max_key_bytes', NEW.max_key_bytes, NEW.max_key_bytes::text,
                              1, 2048, 'a whole number', 'bytes');
    PERFORM _idem_check_limit('max_scope_bytes', NEW.max_scope_bytes, NEW.max_scope_bytes::text,
                              1, 512, 'a whole number', 'bytes');
    PERFORM _idem_check_limit('max_ttl', _idem_micros(NEW.max_ttl) / 1000000, NEW.max_ttl::text,
                              1, 2147483647, 'an interval', 'seconds');
    PERFORM _idem_check_limit('max_response_bytes', NEW.max_response_bytes,
                              NEW.max_response_bytes::text, 0, 2147483647, 'a whole number', 'bytes');
    RETURN NEW;
END
$fn$;

-- Durations are normalised as PostgreSQL compares intervals (a month is 30 days, a day 24
-- hours), in microseconds; NULL for an infinite interval.
CREATE FUNCTION :"storage"._idem_micros(iv interval) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN isfinite(iv) THEN
    ((extract(year FROM iv) * 12 + extract(month FROM iv)) * 30 + extract(day FROM iv)) * 86400000000
    + extract(hour FROM iv) * 3600000000 + extract(minute FROM iv) * 60000000
    + extract(microseconds FROM iv)
END;

-- A pure time interval of that many microseconds (exact below 2^53, ~285 years).
CREATE FUNCTION :"storage"._idem_interval(micros numeric) RETURNS interval
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN micros::float8 * interval '1 microsecond';

-- Microseconds from a to b.
CREATE FUNCTION :"storage"._idem_between(a timestamptz, b timestamptz) RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN (extract(epoch FROM b) - extract(epoch FROM a)) * 1000000;

-- How long a duplicate is told to wait while `owner`'s call of `scope`, claimed at
-- `claimed_at`, runs under a lease until `lease_until` (protocol::estimate in the Rust
-- sources): the estimated time left, at least 100 ms (the floor), at most the lease's end;
-- 1 s when the scope has no completed record. Without shared memory, the estimate is the
-- mean claim-to-completion time of up to 32 of the owner's completed records of the scope
-- (the first the key index finds: a bounded read, taken only when a duplicate arrives).
CREATE FUNCTION :"storage"._idem_retry_after(
    scope text, owner regrole, claimed_at timestamptz, now timestamptz,
    lease_until timestamptz) RETURNS interval
LANGUAGE plpgsql STABLE AS $fn$
#variable_conflict use_variable
DECLARE
    estimate numeric;
    lease_left numeric := greatest(_idem_between(now, lease_until), 0);
BEGIN
    SELECT avg(greatest(_idem_between(coalesce(r.claimed_at, r.created_at), r.completed_at), 0))
    INTO estimate
    FROM (SELECT r.claimed_at, r.created_at, r.completed_at
          FROM records AS r
          WHERE r.scope = _idem_retry_after.scope AND r.owner = _idem_retry_after.owner
            AND r.completed_at IS NOT NULL
          LIMIT 32) AS r;
    IF estimate IS NULL THEN
        RETURN _idem_interval(least(1000000, lease_left));
    END IF;
    RETURN _idem_interval(least(
        greatest(estimate - greatest(_idem_between(claimed_at, now), 0), 100000), lease_left));
END
$fn$;

-- A duration for messages, in seconds.
CREATE FUNCTION :"storage"._idem_seconds(micros numeric) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE WHEN micros % 1000000 = 0 THEN (micros / 1000000)::numeric(1000, 0)::text
            ELSE trim_scale(micros / 1000000.0)::text END || ' s';

-- The role that makes the call: the outer role, outside our SECURITY DEFINER functions and
-- any of the application's (SET ROLE counts, SET SESSION AUTHORIZATION too). Both settings
-- hold a role's bare name, which may need quotes (capitals, spaces, quotes): regrole's
-- input reads an identifier, so the name is quoted first.
CREATE FUNCTION :"storage"._idem_session_role() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN current_setting('role') = 'none' THEN quote_ident(session_user)::regrole
            ELSE quote_ident(current_setting('role'))::regrole END;

-- `role` as the owner of its own records: refused (IK006) when it is a grant role
-- (idempotency_user, idempotency_admin), which every role granted it may become with SET
-- ROLE, so its key space would be all of theirs. The words are the extension's
-- (protocol/src/refusal.rs, grant_role_caller).
CREATE FUNCTION :"storage"._idem_own_owner(role regrole) RETURNS regrole
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF role::text IN ('idempotency_user', 'idempotency_admin') THEN
        PERFORM _idem_fail('IK006', 'a grant role cannot own idempotency records',
            format('The call was made as %s, which every role granted it may become with SET ROLE: its records would be shared by all of them.', role),
            'Call as the application''s own role. Grant it with GRANT idempotency_user TO tenant WITH INHERIT TRUE, SET FALSE (PostgreSQL 16 and later); a NOINHERIT role gets a group role of its own: CREATE ROLE tenant_calls NOLOGIN; GRANT idempotency_user TO tenant_calls; GRANT tenant_calls TO tenant; then SET ROLE tenant_calls.');
    END IF;
    RETURN role;
END
$fn$;

-- The owner of the records a call makes or acts on as its caller: the calling role, never
-- a grant role.
CREATE FUNCTION :"storage"._idem_caller() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_own_owner(_idem_session_role());

-- Whose records idem_lookup or idem_forget act on: the caller's own, or the owner it names
-- when it has the privileges of idempotency_admin (superusers have them; naming an owner,
-- idempotency_admin itself acts as the admin, on a grant role's records made before 0.7.0
-- too). Decided before anything is read, so the refusal is the same whether or not that
-- owner has a record.
CREATE FUNCTION :"storage"._idem_acting_owner(named regrole) RETURNS regrole
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    caller regrole := _idem_session_role();
BEGIN
    IF named IS NULL OR named = caller THEN
        RETURN _idem_own_owner(caller);
    END IF;
    IF pg_catalog.pg_has_role(caller::oid, 'idempotency_admin', 'USAGE') THEN
        RETURN named;
    END IF;
    PERFORM _idem_fail('42501',
        'only members of idempotency_admin may see or forget another role''s records',
        format('The call named owner %s; the calling role is %s.', named, caller),
        'Leave owner NULL to act on your own records, or grant idempotency_admin.');
    RETURN NULL;
END
$fn$;

-- Whose rows idem_metrics shows the caller: its own, or every owner's (NULL) when it has
-- the privileges of idempotency_admin (idempotency_admin itself too: it acts on no record).
CREATE FUNCTION :"storage"._idem_visible_owner() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN pg_catalog.pg_has_role(_idem_session_role()::oid, 'idempotency_admin', 'USAGE')
            THEN NULL ELSE _idem_caller() END;

-- Makes this transaction's commit wait for its WAL flush, and for a synchronous standby's
-- where there is one, whatever the session set: a claim or completion acknowledged and then
-- lost in a crash or a failover would let a call run twice. `on` and `remote_apply` stand;
-- `off`, `local` and `remote_write` are raised to `on`.
CREATE FUNCTION :"storage"._idem_durable_commit() RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
END
$fn$;

-- The limits: checked as written, and seeded from the installer's settings of the same
-- names where it has set them (validated as they are read), else the extension's defaults.
CREATE TRIGGER settings_in_range BEFORE INSERT OR UPDATE ON :"storage".settings
FOR EACH ROW EXECUTE FUNCTION :"storage"._idem_check_settings();
INSERT INTO :"storage".settings (max_key_bytes, max_scope_bytes, max_ttl, max_response_bytes)
VALUES (
    _idem_setting('pg_idempotency.max_key_bytes', 512, '', 1, 2048),
    _idem_setting('pg_idempotency.max_scope_bytes', 128, '', 1, 512),
    justify_hours(_idem_setting('pg_idempotency.max_ttl', 2592000, 's', 1, 2147483647)
                  * interval '1 second'),
    _idem_setting('pg_idempotency.max_response_bytes', 1048576, 'B', 0, 2147483647));

-- Adds a call's outcomes to its owner's counts of the scope (idem_metrics' *_total), in this
-- backend's own row (its process id): two callers of one scope never wait on each other's
-- row, however long their transactions. The counts are the transaction's: what rolls back
-- (a refusal raised, the caller's ROLLBACK) is not counted. pg_idempotency.count_outcomes
-- = 0 counts nothing (docs/decisions.md, "Counts that never fold").
CREATE FUNCTION :"storage"._idem_count(owner regrole, scope text, claimed bigint,
    replay bigint, in_progress bigint, mismatch bigint, refused bigint, unrecorded bigint,
    outcome_unknown bigint)
RETURNS void
LANGUAGE sql VOLATILE AS $fn$
    INSERT INTO counts AS c (owner, scope, slot, claimed, replay, in_progress, mismatch,
                             refused, unrecorded, outcome_unknown)
    SELECT $1, $2, pg_backend_pid(), $3, $4, $5, $6, $7, $8, $9
    WHERE _idem_setting('pg_idempotency.count_outcomes', 1, '', 0, 1) = 1
    ON CONFLICT (owner, scope, slot) DO UPDATE
    SET claimed = c.claimed + excluded.claimed, replay = c.replay + excluded.replay,
        in_progress = c.in_progress + excluded.in_progress,
        mismatch = c.mismatch + excluded.mismatch, refused = c.refused + excluded.refused,
        unrecorded = c.unrecorded + excluded.unrecorded,
        outcome_unknown = c.outcome_unknown + excluded.outcome_unknown
$fn$;

-- Counts one idem_begin outcome ('claimed', 'replay', 'in_progress', 'mismatch', 'refused').
CREATE FUNCTION :"storage"._idem_count_outcome(owner regrole, scope text, outcome text)
RETURNS void
LANGUAGE sql VOLATILE AS $fn$
    SELECT _idem_count($1, $2, ($3 = 'claimed')::integer, ($3 = 'replay')::integer,
                       ($3 = 'in_progress')::integer, ($3 = 'mismatch')::integer,
                       ($3 = 'refused')::integer, 0, 0)
$fn$;

