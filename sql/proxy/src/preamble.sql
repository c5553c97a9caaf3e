-- pg_idempotency, PL/Proxy layer: the SQL API on a proxy database that runs every call on
-- the partition its scope and key hash to. Each partition is a database with pg_idempotency
-- (the extension, or the portable variant in its default schemas) in its public schema;
-- the proxy holds no records. docs/scaling.md says how to set it up, and why it routes
-- as it does.
--
--   psql -d proxy --single-transaction -v ON_ERROR_STOP=1 -f sql/proxy/pg_idempotency_proxy.sql
--   psql -d proxy -c "SELECT * FROM idem_proxy_configure(ARRAY['host=db0 dbname=app', 'host=db1 dbname=app'])"
--
-- Plain SQL, no psql meta-commands: a migration tool applies it as one migration, in one
-- transaction. It needs a superuser (PL/Proxy is an untrusted language).
--
-- Every name below is schema-qualified, so nothing depends on the installer's search_path;
-- the schema is created plainly, so one of that name made by someone else makes the
-- install fail instead of being adopted.
-- The canonical JSON helpers below are the portable variant's, bound through this path.
SET LOCAL search_path = pg_catalog, idempotency, pg_temp;
DO $transaction$
BEGIN
    -- SET LOCAL lasts to the end of a transaction: outside one it was lost already.
    IF pg_catalog.current_setting('search_path') <> 'pg_catalog, idempotency, pg_temp' THEN
        RAISE EXCEPTION 'pg_idempotency: the PL/Proxy layer installs in one transaction'
            USING ERRCODE = 'no_active_sql_transaction',
                  DETAIL = 'Each statement ran in a transaction of its own, so a failure would leave a partial install.',
                  HINT = 'Run it with psql --single-transaction -v ON_ERROR_STOP=1 -f, or as one migration of a migration tool.';
    END IF;
END
$transaction$;

CREATE EXTENSION IF NOT EXISTS plproxy;

CREATE SCHEMA idempotency;
REVOKE ALL ON SCHEMA idempotency FROM PUBLIC;
COMMENT ON SCHEMA idempotency IS
    'pg_idempotency PL/Proxy layer: the result types and the routing helpers (no records: they live on the partitions)';

-- The roles the docs name, as on every partition (a role must exist on the proxy and on
-- each partition: PL/Proxy connects to the partition as the calling role).
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
-- The API functions run as their caller and call the routing helpers here as the caller.
GRANT USAGE ON SCHEMA idempotency TO idempotency_user;
