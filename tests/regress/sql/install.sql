-- Extension only: install hygiene of CREATE EXTENSION (the portable install script's is in
-- tests/tests/operations/portable.rs).
\set VERBOSITY verbose
\set SHOW_CONTEXT never

-- Install hygiene: a schema of our name made by someone else makes the install fail.
DROP EXTENSION pg_idempotency;
CREATE SCHEMA idempotency;
\set VERBOSITY sqlstate
CREATE EXTENSION pg_idempotency;
\set VERBOSITY verbose
DROP SCHEMA idempotency;
CREATE EXTENSION pg_idempotency;
SELECT outcome FROM idem_begin('fresh', 'k');
