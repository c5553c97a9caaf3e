-- Shared by uninstall.sql and migrate-to-extension.sql, after find-install.sql: they know
-- the objects of this version only, so an older install is upgraded first (sql/upgrade/)
-- instead of being half removed.
SELECT pg_catalog.set_config('idem_check.found', version, true) AS idem_found_version,
       version OPERATOR(pg_catalog.=) '0.9.0' AS idem_current
FROM :"storage".installed \gset
\if :idem_current
\else
DO $$ BEGIN
    RAISE EXCEPTION 'this script serves the portable variant 0.9.0, not %',
            pg_catalog.current_setting('idem_check.found')
        USING ERRCODE = 'object_not_in_prerequisite_state',
              DETAIL = 'The storage schema given says version '
                       || pg_catalog.current_setting('idem_check.found') || ' is installed.',
              HINT = 'Upgrade it first with the scripts of sql/upgrade/, in order.';
END $$;
\endif
