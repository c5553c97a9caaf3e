-- pg_idempotency, portable SQL variant: upgrade from 0.3.0 to 0.4.0. Run it like the
-- install, with the same -v schema= and -v storage=, as the role that installed:
--
--   psql -f sql/upgrade/pg_idempotency--0.3.0--0.4.0.sql
--
-- idem_purge_expired's batch_size defaults to NULL, which means the setting
-- pg_idempotency.purge_batch_size (10000 unless set), as in the extension; idem_metrics's
-- comment is the extension's.
--
-- One transaction (however psql runs it); it changes nothing unless <storage>.installed
-- says 0.3.0. Hand-written; fixed once 0.4.0 is released. tests/tests/upgrade.rs installs
-- 0.3.0 (its script as released: sql/released/), upgrades, and compares every object with
-- a fresh 0.4.0 install.
\ir ../include/find-install.sql
SELECT pg_catalog.set_config('idem_upgrade.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.3.0' AS idem_from
FROM :"storage".installed \gset
\if :idem_from
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script upgrades the portable variant from 0.3.0, not from %',
            pg_catalog.current_setting('idem_upgrade.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_upgrade.found') || ' is installed.',
              HINT = 'Apply the scripts of sql/upgrade/ in order, starting from the installed version.';
END $$;
\endif

SET LOCAL search_path = pg_catalog, pg_temp;

-- Replaced in place (a new default is allowed): the same OID, so its privileges stay.
CREATE OR REPLACE FUNCTION :"schema".idem_purge_expired(batch_size integer DEFAULT NULL)
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

COMMENT ON FUNCTION :"schema".idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and outcome counters since the server started (note says why they are NULL)';

UPDATE :"storage".installed SET version = '0.4.0';

\if :_idem_own_transaction
COMMIT;
\endif
