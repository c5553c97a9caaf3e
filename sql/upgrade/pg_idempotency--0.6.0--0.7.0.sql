-- pg_idempotency, portable SQL variant: upgrade from 0.6.0 to 0.7.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.6.0--0.7.0.sql
--
-- A grant role owns no records: a call that acts on records as its caller, made as
-- idempotency_user or idempotency_admin (SET ROLE), is refused with IK006, since every role
-- granted it may become it and would share its key space. The caller is found by the new
-- <storage>._idem_session_role and checked by the new _idem_own_owner; _idem_caller,
-- _idem_acting_owner and _idem_visible_owner are replaced in place; idem_set_policy records
-- the calling role (a grant role included) through _idem_session_role. Records are
-- unchanged: any a grant role made before stay until they expire, and an admin naming
-- their owner may read or forget them.
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.6.0. Hand-written; fixed once 0.7.0 is released. tests/tests/consistency/upgrade.rs
-- installs 0.6.0 (the base script and the upgrades up to it), upgrades, and compares every
-- object with a fresh 0.7.0 install.
\ir ../include/find-install.sql
SELECT pg_catalog.set_config('idem_upgrade.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.6.0' AS idem_from
FROM :"storage".installed \gset
\if :idem_from
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script upgrades the portable variant from 0.6.0, not from %',
            pg_catalog.current_setting('idem_upgrade.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_upgrade.found') || ' is installed.',
              HINT = 'Apply the scripts of sql/upgrade/ in order, starting from the installed version.';
END $$;
\endif

SET LOCAL search_path = pg_catalog, :"storage", pg_temp;

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
CREATE OR REPLACE FUNCTION :"storage"._idem_caller() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN _idem_own_owner(_idem_session_role());

-- Whose records idem_lookup or idem_forget act on: the caller's own, or the owner it names
-- when it has the privileges of idempotency_admin (superusers have them; naming an owner,
-- idempotency_admin itself acts as the admin, on a grant role's records made before 0.7.0
-- too). Decided before anything is read, so the refusal is the same whether or not that
-- owner has a record.
CREATE OR REPLACE FUNCTION :"storage"._idem_acting_owner(named regrole) RETURNS regrole
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
CREATE OR REPLACE FUNCTION :"storage"._idem_visible_owner() RETURNS regrole
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN pg_catalog.pg_has_role(_idem_session_role()::oid, 'idempotency_admin', 'USAGE')
            THEN NULL ELSE _idem_caller() END;

-- As every storage function: execute is never PUBLIC's (the functions replaced in place
-- keep their privileges).
REVOKE ALL ON FUNCTION
    :"storage"._idem_session_role(),
    :"storage"._idem_own_owner(regrole)
    FROM PUBLIC;

SET LOCAL search_path = pg_catalog, pg_temp;

-- Replaced in place (the same signature): the same OID, so its privileges and comment stay.
CREATE OR REPLACE FUNCTION :"schema".idem_set_policy(
    INOUT scope          text,
    INOUT ttl            interval DEFAULT NULL,
    INOUT lease          interval DEFAULT NULL,
    INOUT on_cache_hit   text DEFAULT NULL,
    INOUT cache_failures boolean DEFAULT NULL,
    INOUT on_mismatch    text DEFAULT NULL,
    OUT   updated_at timestamptz,
    OUT   updated_by regrole)
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
    updated_by := _idem_session_role();
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

UPDATE :"storage".installed SET version = '0.7.0';

\if :_idem_own_transaction
COMMIT;
\endif
