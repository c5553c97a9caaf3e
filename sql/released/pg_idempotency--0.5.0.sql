-- pg_idempotency, portable SQL variant: the extension's SQL API in PL/pgSQL and SQL only,
-- for servers where a custom extension cannot be installed (docs/installation.md).
--
--   psql -f sql/pg_idempotency.sql            (one transaction: all of it or nothing)
--   psql --single-transaction -v ON_ERROR_STOP=1 -f sql/pg_idempotency.sql   (the same)
--   psql ... -v schema=app -v storage=app_idempotency -f sql/pg_idempotency.sql
--
-- schema:  where the idem_* functions go (default public; it must exist).
-- storage: the schema this script creates for the records, policies, fence sequence and
--          internal _idem_* helpers (default idempotency). A schema of that name made by
--          someone else makes the install fail instead of being adopted.
--
-- Both names reach SQL only as psql's quoted identifiers (:"schema"), never spliced into
-- function bodies: every function pins search_path = pg_catalog, <storage>, pg_temp, so
-- its unqualified storage names resolve there and nothing on the caller's path (a temp
-- table included: pg_temp comes last) can stand in for them.
--
-- The state machine here is the extension's (pg_idempotency/src/begin.rs, holder.rs), held
-- equal to it by the behaviour suite (tests/, run on both backends) and, with the client's
-- MemoryStore and RedisStore (client/src/memory.rs, client/src/redis.rs), by the parity
-- suite client/tests/parity.rs. Function signatures: protocol/src/functions.rs, compared by
-- tests/tests/signatures.rs.
\set ON_ERROR_STOP 1
\if :{?schema}
\else
\set schema public
\endif
\if :{?storage}
\else
\set storage idempotency
\endif
-- All or nothing, however psql runs this file: with --single-transaction (or inside the
-- caller's own BEGIN) it is already in a transaction and leaves the commit to the caller;
-- run plainly (psql -f, psql < file) it opens its own and commits at the end. Either way
-- the first error stops psql and rolls everything back. A statement that starts its own
-- transaction has transaction_timestamp() = statement_timestamp().
SELECT pg_catalog.transaction_timestamp() OPERATOR(pg_catalog.=) pg_catalog.statement_timestamp()
    AS _idem_own_transaction \gset
\if :_idem_own_transaction
BEGIN;
\endif
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL client_min_messages = warning;

DO $check$
BEGIN
    -- The purge walks the table by TID ranges (PostgreSQL 14).
    IF pg_catalog.current_setting('server_version_num')::int < 140000 THEN
        RAISE EXCEPTION 'pg_idempotency (portable) needs PostgreSQL 14 or later'
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'This server is ' || pg_catalog.version() || '.';
    END IF;
END
$check$;

CREATE SCHEMA :"storage";
REVOKE ALL ON SCHEMA :"storage" FROM PUBLIC;
COMMENT ON SCHEMA :"storage" IS
    'pg_idempotency storage (portable SQL variant): reached only through the idem_* functions';

-- Which release of the portable variant is installed: upgrade scripts check it.
CREATE TABLE :"storage".installed (
    version      text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
INSERT INTO :"storage".installed (version) VALUES ('0.5.0');

CREATE SEQUENCE :"storage".fence_seq AS bigint NO CYCLE;
COMMENT ON SEQUENCE :"storage".fence_seq IS 'pg_idempotency fencing tokens';

CREATE TABLE :"storage".records (
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
    -- Each role its own key space: the same scope and key under two roles are two calls.
    PRIMARY KEY (scope, key, owner)
) WITH (
    -- As in the extension: completions stay HOT updates, and vacuum keeps pace with purges.
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE :"storage".records IS
    'pg_idempotency: one row per (scope, key, owner); expired rows are absent whether purged or not';

CREATE TABLE :"storage".policies (
    scope          text        PRIMARY KEY,
    ttl            interval,
    lease          interval,
    on_cache_hit   text        CHECK (on_cache_hit IN ('return_cached', 'return_cached_if_success', 'fail_fast')),
    cache_failures boolean,
    on_mismatch    text        CHECK (on_mismatch IN ('reject', 'ignore')),
    updated_at     timestamptz NOT NULL,
    updated_by     regrole     NOT NULL
);
COMMENT ON TABLE :"storage".policies IS 'pg_idempotency: per-scope defaults';

-- The limits that bound what a call may store (the extension's superuser-only settings of
-- the same names). A custom setting would be any role's to SET for its own session, so
-- they live here, out of reach of the roles that call the API: the table's owner (the
-- installing role) or a superuser changes them with UPDATE. One row, read once per call;
-- the defaults are the extension's. The ranges are the extension's too: the trigger below
-- refuses a bad value with our messages, the CHECKs hold even where triggers are off.
CREATE TABLE :"storage".settings (
    one                boolean  PRIMARY KEY DEFAULT true CHECK (one),
    max_key_bytes      integer  NOT NULL DEFAULT 512
                       CHECK (max_key_bytes BETWEEN 1 AND 2048),
    max_scope_bytes    integer  NOT NULL DEFAULT 128
                       CHECK (max_scope_bytes BETWEEN 1 AND 512),
    max_ttl            interval NOT NULL DEFAULT '30 days'
                       CHECK (max_ttl >= '1 second' AND max_ttl <= '2147483647 seconds'),
    max_response_bytes integer  NOT NULL DEFAULT 1048576
                       CHECK (max_response_bytes >= 0)
);
COMMENT ON TABLE :"storage".settings IS
    'pg_idempotency limits (max_key_bytes, max_scope_bytes, max_ttl, max_response_bytes): one row, changed by its owner or a superuser';

-- The roles the docs name: members of idempotency_user call the API on their own records;
-- members of idempotency_admin may also see and forget every role's records, read every
-- role's metrics, purge and set policies. Creating them needs CREATEROLE; where they exist
-- already (a second database, or made by an administrator beforehand) they are used as
-- they are.
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

-- The role that makes the call, and owns the records it makes: the outer role, outside our
-- SECURITY DEFINER functions and any of the application's (SET ROLE counts, SET SESSION
-- AUTHORIZATION too). Both settings hold a role's bare name, which may need quotes (capitals,
-- spaces, quotes): regrole's input reads an identifier, so the name is quoted first.
CREATE FUNCTION :"storage"._idem_caller() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN current_setting('role') = 'none' THEN quote_ident(session_user)::regrole
            ELSE quote_ident(current_setting('role'))::regrole END;

-- Whose records idem_lookup or idem_forget act on: the caller's own, or the owner it names
-- when it has the privileges of idempotency_admin (superusers have them). Decided before
-- anything is read, so the refusal is the same whether or not that owner has a record.
CREATE FUNCTION :"storage"._idem_acting_owner(named regrole) RETURNS regrole
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    caller regrole := _idem_caller();
BEGIN
    IF named IS NULL OR named = caller THEN
        RETURN caller;
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
-- the privileges of idempotency_admin.
CREATE FUNCTION :"storage"._idem_visible_owner() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN pg_catalog.pg_has_role(_idem_caller()::oid, 'idempotency_admin', 'USAGE')
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

-- ---------------------------------------------------------------------------------------
-- Arguments: checked before anything is read or written, with the extension's messages.
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION :"storage"._idem_text_arg(name text, value text, max bigint, setting text)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF value IS NULL THEN
        PERFORM _idem_fail('22023', format('%s must not be null', name),
            format('idem_* functions need a %s to find the record.', name),
            format('Pass a non-blank %s.', name));
    END IF;
    -- Unicode White_Space, as the extension's check.
    IF value ~ '^[\u0009-\u000D\u0020\u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*$' THEN
        PERFORM _idem_fail('22023', format('%s must not be blank', name),
            format('The %s is empty or only whitespace.', name),
            format('Pass a non-blank %s.', name));
    END IF;
    IF octet_length(value) > max THEN
        PERFORM _idem_fail('22023', format('%s is too long', name),
            format('The %s has %s bytes; the limit is %s.', name, octet_length(value), max),
            format('Use a shorter %s, or raise %s.', name, setting));
    END IF;
    RETURN value;
END
$fn$;

-- The hints name the extension's settings, as its own messages do: in this variant they are
-- the columns of the same names in <storage>.settings.
CREATE FUNCTION :"storage"._idem_scope(value text, max bigint) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_text_arg('scope', value, max, 'pg_idempotency.max_scope_bytes');

CREATE FUNCTION :"storage"._idem_key(value text, max bigint) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_text_arg('key', value, max, 'pg_idempotency.max_key_bytes');

-- A positive (or, with allow_zero, zero) finite duration no longer than max (max_ttl), in
-- microseconds; NULL stays NULL.
CREATE FUNCTION :"storage"._idem_duration(name text, iv interval, allow_zero boolean, max bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    us numeric;
BEGIN
    IF iv IS NULL THEN
        RETURN NULL;
    END IF;
    us := _idem_micros(iv);
    IF us IS NULL THEN
        PERFORM _idem_fail('22023', format('%s must be finite', name),
            format('The %s is infinite.', name),
            format('Pass a %s of at most pg_idempotency.max_ttl (%s s).', name, max / 1000000));
    END IF;
    IF us < 0 OR (us = 0 AND NOT allow_zero) THEN
        PERFORM _idem_fail('22023',
            format('%s must be %s', name, CASE WHEN allow_zero THEN 'zero or positive' ELSE 'positive' END),
            format('The %s normalises to %s.', name, _idem_seconds(us)),
            format('Pass a %s such as ''30 seconds''.', name));
    END IF;
    IF us > max THEN
        PERFORM _idem_fail('22023', format('%s is too long', name),
            format('The %s normalises to %s; the limit is %s.', name, _idem_seconds(us), _idem_seconds(max)),
            format('Pass a shorter %s, or raise pg_idempotency.max_ttl.', name));
    END IF;
    RETURN us;
END
$fn$;

-- The lease in force: the call's (which may not exceed the ttl), else the policy's or
-- pg_idempotency.default_lease, capped by the ttl.
CREATE FUNCTION :"storage"._idem_effective_lease(given bigint, policy bigint, ttl bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF given IS NOT NULL AND given > ttl THEN
        PERFORM _idem_fail('22023', 'lease must not exceed ttl',
            format('The lease is %s and the ttl %s.', _idem_seconds(given), _idem_seconds(ttl)),
            'Pass a shorter lease or a longer ttl; extend a long call with idem_extend.');
    END IF;
    RETURN coalesce(given, least(coalesce(policy, _idem_default_lease_micros()), ttl));
END
$fn$;

-- The ttl in force: the call's, else the policy's, else pg_idempotency.default_ttl (checked
-- against max_ttl, in microseconds).
CREATE FUNCTION :"storage"._idem_effective_ttl(given bigint, policy bigint, max_ttl bigint)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN coalesce(given, policy,
    _idem_duration('ttl', _idem_interval(_idem_default_ttl_micros()), false, max_ttl));

CREATE FUNCTION :"storage"._idem_word(name text, value text, words text[]) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF value IS NULL OR value = ANY (words) THEN
        RETURN value;
    END IF;
    PERFORM _idem_fail('22023', format('unknown %s "%s"', name, left(value, 64)),
        format('%s takes one of: %s.', name, array_to_string(words, ', ')),
        format('Pass one of those words, or NULL for the default (%s).', words[1]));
    RETURN NULL;
END
$fn$;

CREATE FUNCTION :"storage"._idem_on_cache_hit(value text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_word('on_cache_hit', value,
                  ARRAY['return_cached', 'return_cached_if_success', 'fail_fast']);

CREATE FUNCTION :"storage"._idem_on_mismatch(value text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_word('on_mismatch', value, ARRAY['reject', 'ignore']);

CREATE FUNCTION :"storage"._idem_fence(value bigint) RETURNS bigint
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
BEGIN
    IF value IS NULL THEN
        PERFORM _idem_fail('22023', 'fence must not be null',
            'Only the holder of a claim may complete, release or extend it, named by its fence.',
            'Pass the fence that idem_begin returned with outcome ''claimed''.');
    END IF;
    RETURN value;
END
$fn$;

CREATE FUNCTION :"storage"._idem_lease_lost(detail text) RETURNS void
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN _idem_fail('IK003', 'lease lost: this fence does not hold the record', detail,
    'Another attempt took the call over, or it was completed, released or expired; do not '
    'apply this attempt''s result. Call idem_begin again to learn the call''s state.');

CREATE FUNCTION :"storage"._idem_contention() RETURNS void
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN _idem_fail('40001', 'could not settle the record: it kept changing',
    '1000 concurrent changes to this key overtook this call.', 'Retry the call.');

-- ---------------------------------------------------------------------------------------
-- Canonical JSON (docs/canonical-json.md): RFC 8785 with lossless numbers, byte for byte
-- what the extension and the Rust client compute.
-- ---------------------------------------------------------------------------------------

-- A number: jsonb keeps its exact decimal value, and numeric's text form writes it without
-- an exponent, so its significant digits are all there is to write, in ECMAScript's layout
-- (Number::toString). No float8 is involved, so its text form's quirks never matter.
CREATE FUNCTION :"storage"._idem_canonical_number(literal text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    negative boolean := left(literal, 1) = '-';
    body text := CASE WHEN negative THEN substr(literal, 2) ELSE literal END;
    int_part text := split_part(body, '.', 1);
    all_digits text := int_part || split_part(body, '.', 2);
    digits text := ltrim(all_digits, '0');
    k integer;
    n integer;
    e integer;
    out text;
BEGIN
    IF digits = '' THEN
        RETURN '0';
    END IF;
    -- value = 0.DIGITS x 10^n
    n := length(int_part) - (length(all_digits) - length(digits));
    digits := rtrim(digits, '0');
    k := length(digits);
    IF k <= n AND n <= 21 THEN
        out := digits || repeat('0', n - k);
    ELSIF 0 < n AND n <= 21 THEN
        out := left(digits, n) || '.' || substr(digits, n + 1);
    ELSIF -6 < n AND n <= 0 THEN
        out := '0.' || repeat('0', -n) || digits;
    ELSE
        e := n - 1;
        out := left(digits, 1) || CASE WHEN k > 1 THEN '.' || substr(digits, 2) ELSE '' END
               || 'e' || CASE WHEN e < 0 THEN '-' ELSE '+' END || abs(e);
    END IF;
    RETURN CASE WHEN negative THEN '-' || out ELSE out END;
END
$fn$;

-- An object key's place in UTF-16 code unit order, for keys with characters beyond the
-- Basic Multilingual Plane (whose surrogates sort before U+E000..U+FFFF).
CREATE FUNCTION :"storage"._idem_utf16(key text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN coalesce((
    SELECT decode(string_agg(
               CASE WHEN c < 65536 THEN lpad(to_hex(c), 4, '0')
                    ELSE to_hex(55296 + ((c - 65536) >> 10)) || to_hex(56320 + ((c - 65536) & 1023))
               END, '' ORDER BY i), 'hex')
    FROM (SELECT ascii(ch) AS c, i FROM regexp_split_to_table(key, '') WITH ORDINALITY AS t(ch, i)) AS chars),
    '\x'::bytea);

-- The canonical text of a jsonb value that sits at nesting level `depth` (1 at the top).
CREATE FUNCTION :"storage"._idem_canonical_value(v jsonb, depth integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    kind text := jsonb_typeof(v);
    out text;
BEGIN
    IF kind = 'object' OR kind = 'array' THEN
        IF depth > 128 THEN
            PERFORM _idem_fail('IK005', 'request has no canonical form',
                'JSON nested deeper than 128 levels.',
                'Requests are hashed in canonical JSON, which allows at most 128 levels of nesting.');
        END IF;
    END IF;
    IF kind = 'object' THEN
        -- Code point order is UTF-16 order unless a key has a supplementary character.
        IF getdatabaseencoding() = 'UTF8'
           AND EXISTS (SELECT FROM jsonb_object_keys(v) AS k WHERE k ~ '[\U00010000-\U0010FFFF]') THEN
            SELECT string_agg(to_jsonb(e.key)::text || ':' ||
                       CASE jsonb_typeof(e.value)
                           WHEN 'object' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'array' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'number' THEN _idem_canonical_number(e.value::text)
                           ELSE e.value::text END,
                       ',' ORDER BY _idem_utf16(e.key))
            INTO out FROM jsonb_each(v) AS e;
        ELSE
            SELECT string_agg(to_jsonb(e.key)::text || ':' ||
                       CASE jsonb_typeof(e.value)
                           WHEN 'object' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'array' THEN _idem_canonical_value(e.value, depth + 1)
                           WHEN 'number' THEN _idem_canonical_number(e.value::text)
                           ELSE e.value::text END,
                       ',' ORDER BY convert_to(e.key, 'UTF8'))
            INTO out FROM jsonb_each(v) AS e;
        END IF;
        RETURN '{' || coalesce(out, '') || '}';
    ELSIF kind = 'array' THEN
        SELECT string_agg(
                   CASE jsonb_typeof(a.value)
                       WHEN 'object' THEN _idem_canonical_value(a.value, depth + 1)
                       WHEN 'array' THEN _idem_canonical_value(a.value, depth + 1)
                       WHEN 'number' THEN _idem_canonical_number(a.value::text)
                       ELSE a.value::text END,
                   ',' ORDER BY a.i)
        INTO out FROM jsonb_array_elements(v) WITH ORDINALITY AS a(value, i);
        RETURN '[' || coalesce(out, '') || ']';
    ELSIF kind = 'number' THEN
        RETURN _idem_canonical_number(v::text);
    END IF;
    -- Strings, true, false, null: jsonb writes strings with exactly JCS's escapes.
    RETURN v::text;
END
$fn$;

CREATE FUNCTION :"storage"._idem_hash(request jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN sha256(convert_to(_idem_canonical_value(request, 1), 'UTF8'));

-- Result rows: the extension's named composite types, in the storage schema.
CREATE TYPE :"storage".begin_result AS (
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
COMMENT ON TYPE :"storage".begin_result IS 'What idem_begin answers';
CREATE TYPE :"storage".complete_result AS (state text, expires_at timestamptz);
COMMENT ON TYPE :"storage".complete_result IS 'What idem_complete answers';
CREATE TYPE :"storage".extend_result AS (lease_until timestamptz, expires_at timestamptz);
COMMENT ON TYPE :"storage".extend_result IS 'What idem_extend answers';
CREATE TYPE :"storage".lookup_result AS (
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
COMMENT ON TYPE :"storage".lookup_result IS 'A record as idem_lookup shows it';

-- ---------------------------------------------------------------------------------------
-- The API: the extension's functions, parameters, result columns and errors.
-- ---------------------------------------------------------------------------------------
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE FUNCTION :"schema".idem_begin(
    scope        text,
    key          text,
    request      jsonb    DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    lease        interval DEFAULT NULL,
    on_cache_hit text     DEFAULT NULL,
    on_mismatch  text     DEFAULT NULL,
    wait         interval DEFAULT '0',
    claim_token  uuid     DEFAULT NULL)
RETURNS :"storage".begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    res begin_result;
    lim record := _idem_limits();
    -- The call, validated; durations in microseconds. Its owner is the caller: the record
    -- of another role with the same scope and key is another call, never read here.
    c_owner regrole := _idem_caller();
    c_scope text;
    c_key text;
    c_fp bytea;
    c_ttl bigint;
    c_lease bigint;
    c_hit text;
    c_mismatch text;
    c_wait bigint;
    -- The settings in force: the call's, else the scope's policy, else the defaults.
    s_ttl bigint;
    s_lease bigint;
    s_hit text;
    s_mismatch text;
    resolved boolean := false;
    -- The record as read, and its scope's policy.
    r_state text;
    r_fence bigint;
    r_attempt integer;
    r_fp bytea;
    r_upstream uuid;
    r_response jsonb;
    r_created timestamptz;
    r_lease_until timestamptz;
    r_expires timestamptz;
    r_token uuid;
    r_recovered boolean;
    r_claimed timestamptz;
    p_ttl interval;
    p_lease interval;
    p_hit text;
    p_mismatch text;
    -- A claim, computed before the statement that writes it.
    n_fence bigint;
    n_attempt integer;
    n_fp bytea;
    n_upstream uuid;
    n_created timestamptz;
    n_lease_until timestamptz;
    n_expires timestamptz;
    n_recovered boolean;
    claim boolean;
    started timestamptz := clock_timestamp();
    now timestamptz;
    remaining numeric;
    -- Time spent asleep waiting: the wait ends when it or the wall clock reaches `wait`,
    -- so a clock set back during the wait does not stretch it.
    slept numeric := 0;
    nap numeric;
    pause numeric := 2000;
    written integer;
BEGIN
    c_scope := _idem_scope(idem_begin.scope, lim.max_scope_bytes);
    IF idem_begin.request IS NOT NULL THEN
        c_fp := _idem_hash(idem_begin.request);
    END IF;
    IF idem_begin.key IS NULL THEN
        IF c_fp IS NULL THEN
            PERFORM _idem_fail('22023', 'key must not be null without a request',
                'A NULL key asks for the key to be derived from the request, and no request was given.',
                'Pass a key, or a request to derive it from (HASH_INPUT).');
        END IF;
        c_key := encode(c_fp, 'hex');
    ELSE
        c_key := _idem_key(idem_begin.key, lim.max_key_bytes);
    END IF;
    -- Every outcome answers the key the call used (derived or given).
    res.key := c_key;
    c_ttl := _idem_duration('ttl', idem_begin.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_begin.lease, false, lim.max_ttl_micros);
    c_hit := _idem_on_cache_hit(idem_begin.on_cache_hit);
    c_mismatch := _idem_on_mismatch(idem_begin.on_mismatch);
    c_wait := coalesce(_idem_duration('wait', idem_begin.wait, true, lim.max_ttl_micros), 0);
    IF c_lease IS NOT NULL AND c_ttl IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;

    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        SELECT r.state, r.fence, r.attempt, r.fingerprint, r.upstream_key, r.response,
               r.created_at, r.lease_until, r.expires_at, r.claim_token, r.recovered,
               r.claimed_at, p.ttl, p.lease, p.on_cache_hit, p.on_mismatch
        INTO r_state, r_fence, r_attempt, r_fp, r_upstream, r_response,
             r_created, r_lease_until, r_expires, r_token, r_recovered,
             r_claimed, p_ttl, p_lease, p_hit, p_mismatch
        FROM (SELECT) AS one
        LEFT JOIN records AS r ON r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
        LEFT JOIN policies AS p ON p.scope = c_scope;

        IF NOT resolved THEN
            s_ttl := _idem_effective_ttl(c_ttl, _idem_micros(p_ttl)::bigint, lim.max_ttl_micros);
            s_lease := _idem_effective_lease(c_lease, _idem_micros(p_lease)::bigint, s_ttl);
            s_hit := coalesce(c_hit, _idem_on_cache_hit(p_hit), 'return_cached');
            s_mismatch := coalesce(c_mismatch, _idem_on_mismatch(p_mismatch), 'reject');
            resolved := true;
        END IF;

        claim := false;
        IF r_state IS NULL OR r_expires <= now THEN
            -- Absent or expired: a fresh call.
            n_fence := nextval('fence_seq');
            n_attempt := 1;
            n_fp := c_fp;
            n_upstream := gen_random_uuid();
            n_created := now;
            n_lease_until := now + _idem_interval(s_lease);
            n_expires := now + _idem_interval(s_ttl);
            n_recovered := false;
            claim := true;
        ELSE
            IF c_fp IS NOT NULL AND r_fp IS NOT NULL AND s_mismatch = 'reject' AND c_fp <> r_fp THEN
                PERFORM _idem_fail('IK001', 'idempotency key reused with a different request',
                    format('The key was first used with a request of fingerprint \x%s; this request''s fingerprint is \x%s.',
                           encode(r_fp, 'hex'), encode(c_fp, 'hex')),
                    'Use a new key for a different request, or on_mismatch => ''ignore'' when only part of the request names the call.');
            END IF;
            IF r_state = 'in_progress' AND r_lease_until > now THEN
                -- The caller's own claim, repeated because its answer was lost: the claim
                -- as it stands, at once (no wait) and unchanged (the lease is not renewed).
                IF idem_begin.claim_token IS NOT NULL AND idem_begin.claim_token = r_token THEN
                    res.outcome := 'claimed';
                    res.fence := r_fence;
                    res.attempt := r_attempt;
                    res.recovered := r_recovered;
                    res.upstream_key := r_upstream;
                    res.lease_until := r_lease_until;
                    res.expires_at := r_expires;
                    RETURN res;
                END IF;
                remaining := c_wait - greatest(slept, _idem_between(started, now));
                IF remaining <= 0 THEN
                    res.outcome := 'in_progress';
                    res.attempt := r_attempt;
                    res.recovered := false;
                    res.upstream_key := r_upstream;
                    res.lease_until := r_lease_until;
                    res.expires_at := r_expires;
                    res.retry_after := _idem_retry_after(c_scope, c_owner,
                        coalesce(r_claimed, r_created), now, r_lease_until);
                    RETURN res;
                END IF;
                nap := least(greatest(least(pause, remaining) / 1000000, 0.001), 1);
                PERFORM pg_sleep(nap);
                slept := slept + nap * 1000000;
                pause := least(pause * 2, 100000);
            ELSIF r_state = 'in_progress'
                  OR (r_state = 'failed' AND s_hit = 'return_cached_if_success') THEN
                -- A lapsed lease (its outcome is unknown: recovered) or a failure to run
                -- again: the same call, so its upstream key and creation time stay. A sequence
                -- shared by many sessions does not alone order fences per key; greatest() does.
                n_fence := greatest(nextval('fence_seq'), r_fence + 1);
                n_attempt := CASE WHEN r_attempt < 2147483647 THEN r_attempt + 1 ELSE r_attempt END;
                -- The first request's fingerprint stays the call's identity.
                n_fp := coalesce(r_fp, c_fp);
                n_upstream := r_upstream;
                n_created := r_created;
                n_lease_until := now + _idem_interval(s_lease);
                n_expires := greatest(now + _idem_interval(s_ttl), r_expires);
                n_recovered := r_state = 'in_progress';
                claim := true;
            ELSIF s_hit = 'fail_fast' THEN
                PERFORM _idem_fail('IK002', 'repeat of a completed call refused',
                    format('The call %s at attempt %s; on_cache_hit is ''fail_fast''.', r_state, r_attempt),
                    'Look at the stored result with idem_lookup, or use a new key to run the call again.');
            ELSE
                res.outcome := 'replay';
                res.attempt := r_attempt;
                res.recovered := false;
                res.upstream_key := r_upstream;
                res.succeeded := r_state = 'succeeded';
                res.response := r_response;
                res.lease_until := r_lease_until;
                res.expires_at := r_expires;
                RETURN res;
            END IF;
        END IF;

        IF claim THEN
            PERFORM _idem_durable_commit();
            IF r_state IS NULL THEN
                INSERT INTO records AS r (scope, key, state, fence, attempt, fingerprint,
                                          upstream_key, created_at, lease_until, expires_at, ttl, owner,
                                          claim_token, recovered, claimed_at)
                VALUES (c_scope, c_key, 'in_progress', n_fence, 1, n_fp, n_upstream, n_created,
                        n_lease_until, n_expires, _idem_interval(s_ttl), c_owner,
                        idem_begin.claim_token, false, now)
                ON CONFLICT (scope, key, owner) DO NOTHING;
            ELSE
                -- Only if the record is still as it was read (a completion or an extension in
                -- between wins).
                UPDATE records AS r
                SET state = 'in_progress', fence = n_fence, attempt = n_attempt,
                    fingerprint = n_fp, upstream_key = n_upstream, response = NULL,
                    created_at = n_created, completed_at = NULL, lease_until = n_lease_until,
                    expires_at = n_expires, ttl = _idem_interval(s_ttl),
                    claim_token = idem_begin.claim_token, recovered = n_recovered,
                    claimed_at = now
                WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = r_fence
                  AND r.state = r_state
                  AND coalesce(r.lease_until, '-infinity') = coalesce(r_lease_until, '-infinity');
            END IF;
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written = 1 THEN
                res.outcome := 'claimed';
                res.fence := n_fence;
                res.attempt := n_attempt;
                res.recovered := n_recovered;
                res.upstream_key := n_upstream;
                res.lease_until := n_lease_until;
                res.expires_at := n_expires;
                RETURN res;
            END IF;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid) IS
    'Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)';

-- What only the holder of a claim may do, named by its fence: read the record, decide, then
-- write with a statement guarded by the fence; if the record changed in between, read
-- again. A stale fence is an error, never a silent no-op.

-- The live record of `owner` that `fence` holds, or lease lost; returns its state, ttl and
-- expiry, and its scope's policy fields. Another owner's record is not looked at: a fence
-- of theirs is lost here exactly as a made-up one on a key nobody used.
CREATE FUNCTION :"storage"._idem_read_held(
    scope text, key text, owner regrole, fence bigint, now timestamptz,
    OUT state text, OUT ttl interval, OUT expires_at timestamptz,
    OUT policy_lease interval, OUT policy_cache_failures boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
    r_fence bigint;
BEGIN
    SELECT r.state, r.fence, r.ttl, r.expires_at, p.lease, p.cache_failures
    INTO state, r_fence, ttl, expires_at, policy_lease, policy_cache_failures
    FROM (SELECT) AS one
    LEFT JOIN records AS r ON r.scope = _idem_read_held.scope AND r.key = _idem_read_held.key
                          AND r.owner = _idem_read_held.owner
    LEFT JOIN policies AS p ON p.scope = _idem_read_held.scope;
    IF state IS NULL OR expires_at <= now THEN
        PERFORM _idem_lease_lost(
            'The key has no live record: it was released, forgotten, never claimed, or it expired.');
    END IF;
    IF r_fence <> _idem_read_held.fence THEN
        PERFORM _idem_lease_lost(CASE WHEN r_fence > _idem_read_held.fence
            THEN 'The record is held under a later fence: the call was taken over or claimed again.'
            ELSE 'The record is held under a different fence.' END);
    END IF;
END
$fn$;

CREATE FUNCTION :"schema".idem_complete(
    scope         text,
    key           text,
    fence         bigint,
    response      jsonb,
    succeeded     boolean DEFAULT true,
    cache_failure boolean DEFAULT NULL)
RETURNS :"storage".complete_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    res complete_result;
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_complete.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_complete.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_complete.fence);
    max_bytes bigint;
    bytes bigint;
    held record;
    cache boolean;
    new_state text;
    now timestamptz;
    written integer;
BEGIN
    IF idem_complete.response IS NOT NULL THEN
        max_bytes := lim.max_response_bytes;
        -- The size of the jsonb, uncompressed, without its header (as the extension counts);
        -- a compressed or stored value is measured on a fresh copy.
        bytes := pg_column_size(idem_complete.response) - 4;
        IF bytes + 4 > max_bytes OR pg_column_compression(idem_complete.response) IS NOT NULL THEN
            bytes := pg_column_size(idem_complete.response::text::jsonb) - 4;
        END IF;
        IF bytes > max_bytes THEN
            PERFORM _idem_fail('IK004', 'response is too large',
                format('The response takes %s bytes as jsonb; the limit is %s.', bytes, max_bytes),
                'Store a smaller response (a reference to the result instead of the result), or raise pg_idempotency.max_response_bytes.');
        END IF;
    END IF;
    IF idem_complete.succeeded IS NULL THEN
        PERFORM _idem_fail('22023', 'succeeded must not be null',
            'A completion records whether the call succeeded.',
            'Pass succeeded => true or false.');
    END IF;
    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, now);
        IF held.state <> 'in_progress' THEN
            -- Completed by this very fence before (its first reply may have been lost): keep
            -- what is stored.
            res.state := held.state;
            res.expires_at := held.expires_at;
            RETURN res;
        END IF;
        PERFORM _idem_durable_commit();
        -- The call's word, else its scope's policy; failures are not cached by default.
        cache := coalesce(idem_complete.cache_failure, held.policy_cache_failures, false);
        IF NOT idem_complete.succeeded AND NOT cache THEN
            -- An uncached failure leaves nothing behind, so a retry runs the call again.
            DELETE FROM records AS r
            WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
              AND r.state = 'in_progress';
            GET DIAGNOSTICS written = ROW_COUNT;
            IF written = 1 THEN
                res.state := 'absent';
                RETURN res;
            END IF;
            CONTINUE;
        END IF;
        new_state := CASE WHEN idem_complete.succeeded THEN 'succeeded' ELSE 'failed' END;
        UPDATE records AS r
        SET state = new_state, response = idem_complete.response, completed_at = now,
            lease_until = NULL, expires_at = now + held.ttl
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            res.state := new_state;
            res.expires_at := now + held.ttl;
            RETURN res;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_complete(text, text, bigint, jsonb, boolean, boolean) IS
    'Record the result of a claimed call; the fence must still hold the record';

CREATE FUNCTION :"schema".idem_release(scope text, key text, fence bigint)
RETURNS void
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_release.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_release.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_release.fence);
    held record;
    written integer;
BEGIN
    FOR race IN 1..1000 LOOP
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, clock_timestamp());
        IF held.state <> 'in_progress' THEN
            PERFORM _idem_lease_lost(
                'The call was already completed; idem_forget removes a stored result.');
        END IF;
        PERFORM _idem_durable_commit();
        DELETE FROM records AS r
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            RETURN;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_release(text, text, bigint) IS
    'Give up a claim without a result, so that the next idem_begin claims the call';

CREATE FUNCTION :"schema".idem_extend(
    scope text,
    key   text,
    fence bigint,
    lease interval DEFAULT NULL)
RETURNS :"storage".extend_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    res extend_result;
    lim record := _idem_limits();
    c_owner regrole := _idem_caller();
    c_scope text := _idem_scope(idem_extend.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_extend.key, lim.max_key_bytes);
    c_fence bigint := _idem_fence(idem_extend.fence);
    c_lease bigint := _idem_duration('lease', idem_extend.lease, false, lim.max_ttl_micros);
    held record;
    now timestamptz;
    n_lease bigint;
    n_lease_until timestamptz;
    n_expires timestamptz;
    written integer;
BEGIN
    FOR race IN 1..1000 LOOP
        now := clock_timestamp();
        held := _idem_read_held(c_scope, c_key, c_owner, c_fence, now);
        IF held.state <> 'in_progress' THEN
            PERFORM _idem_lease_lost('The call was already completed; there is no lease to extend.');
        END IF;
        n_lease := _idem_effective_lease(c_lease, _idem_micros(held.policy_lease)::bigint,
                                         _idem_micros(held.ttl)::bigint);
        n_lease_until := now + _idem_interval(n_lease);
        -- A record never expires while its lease is live.
        n_expires := greatest(held.expires_at, n_lease_until);
        PERFORM _idem_durable_commit();
        UPDATE records AS r SET lease_until = n_lease_until, expires_at = n_expires
        WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.fence = c_fence
          AND r.state = 'in_progress';
        GET DIAGNOSTICS written = ROW_COUNT;
        IF written = 1 THEN
            res.lease_until := n_lease_until;
            res.expires_at := n_expires;
            RETURN res;
        END IF;
    END LOOP;
    PERFORM _idem_contention();
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_extend(text, text, bigint, interval) IS
    'Extend the lease of a claim that is still running (a heartbeat)';

-- idem_lookup's body (PL/pgSQL refuses result columns named like the parameters). The
-- arguments are checked first, then whose record it may see, then it reads.
CREATE FUNCTION :"storage"._idem_lookup(p_scope text, p_key text, p_owner regrole)
RETURNS SETOF :"storage".lookup_result
LANGUAGE plpgsql VOLATILE ROWS 1 AS $fn$
DECLARE
    lim record := _idem_limits();
    c_scope text := _idem_scope(p_scope, lim.max_scope_bytes);
    c_key text := _idem_key(p_key, lim.max_key_bytes);
    c_owner regrole := _idem_acting_owner(p_owner);
    now timestamptz := clock_timestamp();
BEGIN
    -- The record as the API shows it: the claim token stays inside (it holds the claim).
    RETURN QUERY
    SELECT r.scope, r.key, r.state, r.fence, r.attempt, r.fingerprint, r.upstream_key,
           r.response, r.created_at, r.completed_at, r.lease_until, r.expires_at, r.ttl,
           r.owner
    FROM records AS r
    WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner AND r.expires_at > now;
END
$fn$;

-- owner NULL: the caller's own record. Naming another role needs idempotency_admin.
CREATE FUNCTION :"schema".idem_lookup(scope text, key text, owner regrole DEFAULT NULL)
RETURNS SETOF :"storage".lookup_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    SELECT * FROM _idem_lookup($1, $2, $3)
$fn$;
COMMENT ON FUNCTION :"schema".idem_lookup(text, text, regrole) IS
    'The caller''s record of a call (an admin: owner''s) until it expires; no row when it is absent or expired';

CREATE FUNCTION :"schema".idem_forget(scope text, key text, owner regrole DEFAULT NULL)
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_scope text := _idem_scope(idem_forget.scope, lim.max_scope_bytes);
    c_key text := _idem_key(idem_forget.key, lim.max_key_bytes);
    c_owner regrole := _idem_acting_owner(idem_forget.owner);
    now timestamptz := clock_timestamp();
    gone timestamptz;
BEGIN
    DELETE FROM records AS r WHERE r.scope = c_scope AND r.key = c_key AND r.owner = c_owner
    RETURNING r.expires_at INTO gone;
    RETURN coalesce(gone > now, false);
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_forget(text, text, regrole) IS
    'Remove the caller''s record (an admin: owner''s), e.g. a bad cached result; true when a live one was removed';

CREATE FUNCTION :"schema".idem_canonical(request jsonb)
RETURNS text
IMMUTABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql
RETURN :"storage"._idem_canonical_value(request, 1);
COMMENT ON FUNCTION :"schema".idem_canonical(jsonb) IS
    'Canonical JSON of a request: RFC 8785 with lossless numbers (what idem_hash hashes)';

CREATE FUNCTION :"schema".idem_hash(request jsonb)
RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql
RETURN :"storage"._idem_hash(request);
COMMENT ON FUNCTION :"schema".idem_hash(jsonb) IS
    'SHA-256 of the canonical JSON of a request: its fingerprint; as lowercase hex, its HASH_INPUT key';

-- Walks the table in physical order, batch_size expired rows per statement, locked with
-- SKIP LOCKED (a row a concurrent idem_begin is claiming again is left for the next run)
-- and re-checked under the lock, so a live record is never deleted. No index on
-- expires_at: its updates would make every completion a non-HOT update.
CREATE FUNCTION :"schema".idem_purge_expired(batch_size integer DEFAULT NULL)
RETURNS bigint
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    n integer := coalesce(idem_purge_expired.batch_size,
        _idem_setting('pg_idempotency.purge_batch_size', 10000, '', 1, 2147483647));
    now timestamptz := clock_timestamp();
    done_upto tid := '(0,0)';
    batch_end tid;
    deleted bigint;
    total bigint := 0;
BEGIN
    IF n <= 0 THEN
        PERFORM _idem_fail('22023', 'batch_size must be positive',
            format('batch_size is %s.', n),
            'Pass a positive batch size, or NULL for pg_idempotency.purge_batch_size.');
    END IF;
    LOOP
        WITH doomed AS (
            SELECT r.ctid FROM records AS r
            WHERE r.ctid > done_upto AND r.expires_at <= now
            LIMIT n FOR UPDATE SKIP LOCKED),
        gone AS (
            DELETE FROM records AS r USING doomed
            WHERE r.ctid = doomed.ctid AND r.expires_at <= now
            RETURNING r.ctid)
        SELECT count(*), max(gone.ctid) INTO deleted, batch_end FROM gone;
        total := total + deleted;
        EXIT WHEN deleted < n;
        done_upto := greatest(done_upto, batch_end);
    END LOOP;
    RETURN total;
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_purge_expired(integer) IS
    'Delete the rows of expired records, batch_size at a time; returns how many (never a live record)';

-- INOUT: the policy comes back as stored (durations normalised).
CREATE FUNCTION :"schema".idem_set_policy(
    INOUT scope          text,
    INOUT ttl            interval DEFAULT NULL,
    INOUT lease          interval DEFAULT NULL,
    INOUT on_cache_hit   text     DEFAULT NULL,
    INOUT cache_failures boolean  DEFAULT NULL,
    INOUT on_mismatch    text     DEFAULT NULL,
    OUT   updated_at     timestamptz,
    OUT   updated_by     regrole)
RETURNS record
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    lim record := _idem_limits();
    c_ttl bigint;
    c_lease bigint;
BEGIN
    scope := _idem_scope(idem_set_policy.scope, lim.max_scope_bytes);
    c_ttl := _idem_duration('ttl', idem_set_policy.ttl, false, lim.max_ttl_micros);
    c_lease := _idem_duration('lease', idem_set_policy.lease, false, lim.max_ttl_micros);
    IF c_ttl IS NOT NULL AND c_lease IS NOT NULL THEN
        PERFORM _idem_effective_lease(c_lease, NULL, c_ttl);
    END IF;
    PERFORM _idem_on_cache_hit(idem_set_policy.on_cache_hit);
    PERFORM _idem_on_mismatch(idem_set_policy.on_mismatch);
    ttl := _idem_interval(c_ttl);
    lease := _idem_interval(c_lease);
    updated_at := clock_timestamp();
    updated_by := _idem_caller();
    INSERT INTO policies AS p (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch,
                               updated_at, updated_by)
    VALUES (idem_set_policy.scope, idem_set_policy.ttl, idem_set_policy.lease,
            idem_set_policy.on_cache_hit, idem_set_policy.cache_failures,
            idem_set_policy.on_mismatch, idem_set_policy.updated_at, idem_set_policy.updated_by)
    ON CONFLICT (scope) DO UPDATE SET ttl = excluded.ttl, lease = excluded.lease,
        on_cache_hit = excluded.on_cache_hit, cache_failures = excluded.cache_failures,
        on_mismatch = excluded.on_mismatch, updated_at = excluded.updated_at,
        updated_by = excluded.updated_by;
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_set_policy(text, interval, interval, text, boolean, text) IS
    'Set (replace) the policy of a scope: the defaults every caller of that scope obeys';

CREATE FUNCTION :"schema".idem_drop_policy(scope text)
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    c_scope text := _idem_scope(idem_drop_policy.scope, (_idem_limits()).max_scope_bytes);
    written integer;
BEGIN
    DELETE FROM policies AS p WHERE p.scope = c_scope;
    GET DIAGNOSTICS written = ROW_COUNT;
    RETURN written > 0;
END
$fn$;
COMMENT ON FUNCTION :"schema".idem_drop_policy(text) IS
    'Remove the policy of a scope; true when it had one';

CREATE FUNCTION :"schema".idem_policies()
RETURNS TABLE (scope text, ttl interval, lease interval, on_cache_hit text,
               cache_failures boolean, on_mismatch text, updated_at timestamptz, updated_by regrole)
STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by
    FROM policies ORDER BY scope
$fn$;
COMMENT ON FUNCTION :"schema".idem_policies() IS 'Every scope''s policy';

-- Per owner and scope: a role sees its own rows, a role with idempotency_admin's privileges
-- every owner's. The outcome counters live in the extension's shared memory; the portable
-- variant has none, so they are NULL here (as in the extension when it is not preloaded).
CREATE FUNCTION :"schema".idem_metrics()
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
VOLATILE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t, _idem_visible_owner() AS visible)
    SELECT r.owner, r.scope,
           count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress'),
           count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'succeeded'),
           count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'failed'),
           count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress'
                              AND r.lease_until <= now.t),
           count(*) FILTER (WHERE r.expires_at <= now.t),
           now.t - min(r.created_at) FILTER (WHERE r.expires_at > now.t
                                              AND r.state = 'in_progress'),
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
           'outcome counters are off: the portable variant keeps none (the extension, preloaded, counts them)'
    FROM records r, now
    WHERE now.visible IS NULL OR r.owner = now.visible
    GROUP BY r.owner, r.scope, now.t
    ORDER BY r.owner::text, r.scope
$fn$;
COMMENT ON FUNCTION :"schema".idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and outcome counters since the server started (note says why they are NULL)';

-- ---------------------------------------------------------------------------------------
-- Privileges: execute is granted deliberately, never to PUBLIC.
-- ---------------------------------------------------------------------------------------
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA :"storage" FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION
    :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid),
    :"schema".idem_complete(text, text, bigint, jsonb, boolean, boolean),
    :"schema".idem_release(text, text, bigint),
    :"schema".idem_extend(text, text, bigint, interval),
    :"schema".idem_lookup(text, text, regrole),
    :"schema".idem_forget(text, text, regrole),
    :"schema".idem_canonical(jsonb),
    :"schema".idem_hash(jsonb),
    :"schema".idem_purge_expired(integer),
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text),
    :"schema".idem_drop_policy(text),
    :"schema".idem_policies(),
    :"schema".idem_metrics()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid),
    :"schema".idem_complete(text, text, bigint, jsonb, boolean, boolean),
    :"schema".idem_release(text, text, bigint),
    :"schema".idem_extend(text, text, bigint, interval),
    :"schema".idem_lookup(text, text, regrole),
    :"schema".idem_forget(text, text, regrole),
    :"schema".idem_canonical(jsonb),
    :"schema".idem_hash(jsonb),
    :"schema".idem_policies(),
    :"schema".idem_metrics()
TO idempotency_user;
GRANT EXECUTE ON FUNCTION
    :"schema".idem_purge_expired(integer),
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text),
    :"schema".idem_drop_policy(text)
TO idempotency_admin;

\if :_idem_own_transaction
COMMIT;
\endif
