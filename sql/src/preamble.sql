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
-- suite client/tests/parity.rs. The API functions are declared once, with the extension's,
-- in protocol/src/functions.rs; tests/tests/consistency/signatures.rs compares what both
-- backends install.
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
