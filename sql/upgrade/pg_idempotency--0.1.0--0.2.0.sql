-- pg_idempotency, portable SQL variant: upgrade from 0.1.0 to 0.2.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.1.0--0.2.0.sql
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.1.0. Hand-written; fixed once 0.2.0 is released. tests/tests/upgrade.rs installs
-- 0.1.0 (its script as released: sql/released/), upgrades, and compares every object with
-- a fresh 0.2.0 install.
\ir ../include/find-install.sql
SELECT pg_catalog.set_config('idem_upgrade.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.1.0' AS idem_from
FROM :"storage".installed \gset
\if :idem_from
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script upgrades the portable variant from 0.1.0, not from %',
            pg_catalog.current_setting('idem_upgrade.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_upgrade.found') || ' is installed.',
              HINT = 'Apply the scripts of sql/upgrade/ in order, starting from the installed version.';
END $$;
\endif

-- idem_metrics() gains the column note: why the outcome counters are NULL. A function's
-- result columns cannot change in place: drop, create, comment and grant again.
DROP FUNCTION :"schema".idem_metrics();
CREATE FUNCTION :"schema".idem_metrics()
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
VOLATILE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, :"storage", pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t)
    SELECT r.scope,
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
    GROUP BY r.scope, now.t
    ORDER BY 1
$fn$;
COMMENT ON FUNCTION :"schema".idem_metrics() IS
    'Per scope: live records by state, lapsed leases, expired rows not yet purged and the oldest running claim (the outcome counters are the extension''s: NULL here, and note says so)';
REVOKE EXECUTE ON FUNCTION :"schema".idem_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".idem_metrics() TO idempotency_admin;

UPDATE :"storage".installed SET version = '0.2.0';

\if :_idem_own_transaction
COMMIT;
\endif
