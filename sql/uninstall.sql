-- pg_idempotency, portable SQL variant: removes what sql/pg_idempotency.sql installed,
-- records included. Give the same schema and storage as at install.
--
--   psql --single-transaction -v ON_ERROR_STOP=1 -f sql/uninstall.sql
--   psql ... -v schema=app -v storage=app_idempotency -f sql/uninstall.sql
--
-- The roles idempotency_user and idempotency_admin belong to the cluster and may serve
-- other databases, so they stay (DROP ROLE them by hand once nothing uses them).
\set ON_ERROR_STOP 1
\if :{?schema}
\else
\set schema public
\endif
\if :{?storage}
\else
\set storage idempotency
\endif
SET LOCAL search_path = pg_catalog, pg_temp;

-- Refuse to drop a schema that is not a portable install (the extension's included).
SELECT pg_catalog.to_regclass(pg_catalog.format('%I.installed', :'storage')) IS NOT NULL
    AS idem_found \gset
\if :idem_found
\else
DO $$ BEGIN
    RAISE EXCEPTION 'no portable pg_idempotency install in the storage schema given'
        USING ERRCODE = 'undefined_object',
              HINT = 'Pass -v storage=<schema> as at install; the extension is removed with DROP EXTENSION.';
END $$;
\endif

DROP FUNCTION :"schema".idem_begin(text, text, jsonb, interval, interval, text, text, interval),
    :"schema".idem_complete(text, text, bigint, jsonb, boolean, boolean),
    :"schema".idem_release(text, text, bigint),
    :"schema".idem_extend(text, text, bigint, interval),
    :"schema".idem_lookup(text, text),
    :"schema".idem_forget(text, text),
    :"schema".idem_canonical(jsonb),
    :"schema".idem_hash(jsonb),
    :"schema".idem_purge_expired(integer),
    :"schema".idem_set_policy(text, interval, interval, text, boolean, text),
    :"schema".idem_drop_policy(text),
    :"schema".idem_policies(),
    :"schema".idem_metrics();
DROP SCHEMA :"storage" CASCADE;
