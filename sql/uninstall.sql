-- pg_idempotency, portable SQL variant: removes what sql/pg_idempotency.sql installed,
-- records included. Give the same schema and storage as at install.
--
--   psql -f sql/uninstall.sql
--   psql ... -v schema=app -v storage=app_idempotency -f sql/uninstall.sql
--
-- The roles idempotency_user and idempotency_admin belong to the cluster and may serve
-- other databases, so they stay (DROP ROLE them by hand once nothing uses them).
\ir include/find-install.sql
\ir include/require-current.sql

\ir include/drop-api.sql
DROP SCHEMA :"storage" CASCADE;

\if :_idem_own_transaction
COMMIT;
\endif
