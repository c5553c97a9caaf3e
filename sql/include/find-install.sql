-- Shared by uninstall.sql and migrate-to-extension.sql: the psql variables as at install
-- (schema, storage), a pinned search_path, and a refusal to touch a storage schema that is
-- not a portable install (the extension's included).
\set ON_ERROR_STOP 1
\if :{?schema}
\else
\set schema public
\endif
\if :{?storage}
\else
\set storage idempotency
\endif
-- One transaction however psql runs the file (see pg_idempotency.sql); the including
-- script commits at its end when the transaction is its own.
SELECT pg_catalog.transaction_timestamp() OPERATOR(pg_catalog.=) pg_catalog.statement_timestamp()
    AS _idem_own_transaction \gset
\if :_idem_own_transaction
BEGIN;
\endif
SET LOCAL search_path = pg_catalog, pg_temp;

SELECT pg_catalog.to_regclass(pg_catalog.format('%I.installed', :'storage')) IS NOT NULL
    AS idem_found \gset
\if :idem_found
\else
DO $$ BEGIN
    RAISE EXCEPTION 'no portable pg_idempotency install in the storage schema given'
        USING ERRCODE = 'undefined_object',
              HINT = 'Pass -v schema= and -v storage= as given at install.';
END $$;
\endif
