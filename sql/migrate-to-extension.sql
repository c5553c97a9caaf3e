-- pg_idempotency: moves a portable SQL install to the extension, records, policies and
-- fences included, in one transaction. Needs a superuser (CREATE EXTENSION does) and the
-- extension's files on the server (docs/installation.md).
--
--   psql --single-transaction -v ON_ERROR_STOP=1 -f sql/migrate-to-extension.sql
--   psql ... -v schema=app -v storage=app_idempotency -f sql/migrate-to-extension.sql
--
-- schema and storage are the ones given at install. The extension's API goes into the same
-- schema; its storage is always the schema idempotency. Calls made while this runs wait for
-- its locks; a call that waited gets an error once it commits (its function is gone) and
-- its retry reaches the extension.
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

SELECT pg_catalog.to_regclass(pg_catalog.format('%I.installed', :'storage')) IS NOT NULL
    AS idem_found \gset
\if :idem_found
\else
DO $$ BEGIN
    RAISE EXCEPTION 'no portable pg_idempotency install in the storage schema given'
        USING ERRCODE = 'undefined_object',
              HINT = 'Pass -v storage=<schema> as at install.';
END $$;
\endif

-- Nobody writes records while they move.
LOCK TABLE :"storage".records, :"storage".policies IN ACCESS EXCLUSIVE MODE;

-- The portable storage steps aside (the extension creates the schema idempotency itself).
ALTER SCHEMA :"storage" RENAME TO _idem_migrating;
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

CREATE EXTENSION pg_idempotency SCHEMA :"schema";

INSERT INTO idempotency.records
    (scope, key, state, fence, attempt, fingerprint, upstream_key, response, created_at,
     completed_at, lease_until, expires_at, ttl, owner)
SELECT scope, key, state, fence, attempt, fingerprint, upstream_key, response, created_at,
       completed_at, lease_until, expires_at, ttl, owner
FROM _idem_migrating.records;
INSERT INTO idempotency.policies
    (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by)
SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by
FROM _idem_migrating.policies;

-- Every fence handed out so far stays behind the extension's next one: a holder that
-- claimed before the move completes with its fence, and no fence is issued twice.
SELECT pg_catalog.setval('idempotency.fence_seq',
    GREATEST(s.last_value, (SELECT pg_catalog.max(fence) FROM _idem_migrating.records), 1))
FROM _idem_migrating.fence_seq AS s;

DROP SCHEMA _idem_migrating CASCADE;
