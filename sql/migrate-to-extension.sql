-- pg_idempotency: moves a portable SQL install to the extension, records, policies, fences,
-- resolutions and outcome counts included, in one transaction. Needs a superuser (CREATE
-- EXTENSION does) and the extension's files on the server (docs/installation.md).
--
--   psql -f sql/migrate-to-extension.sql
--   psql ... -v schema=app -v storage=app_idempotency -f sql/migrate-to-extension.sql
--
-- schema and storage are the ones given at install. The extension's API goes into the same
-- schema; its storage is always the schema idempotency. Calls made while this runs wait for
-- its locks; a call that waited gets an error once it commits (its function is gone) and
-- its retry reaches the extension.
\ir include/find-install.sql
\ir include/require-current.sql

-- Nobody writes what moves while it moves.
LOCK TABLE :"storage".records, :"storage".policies, :"storage".resolutions, :"storage".counts
    IN ACCESS EXCLUSIVE MODE;

-- The portable storage steps aside (the extension creates the schema idempotency itself).
ALTER SCHEMA :"storage" RENAME TO _idem_migrating;
\ir include/drop-api.sql

CREATE EXTENSION pg_idempotency SCHEMA :"schema";

INSERT INTO idempotency.records
    (scope, key, state, fence, attempt, fingerprint, upstream_key, response, created_at,
     completed_at, lease_until, expires_at, ttl, owner, claim_token, recovered,
     claimed_at, unresolved_until, lease_length)
SELECT scope, key, state, fence, attempt, fingerprint, upstream_key, response, created_at,
       completed_at, lease_until, expires_at, ttl, owner, claim_token, recovered,
       claimed_at, unresolved_until, lease_length
FROM _idem_migrating.records;
INSERT INTO idempotency.resolutions
    (resolved_at, resolved_by, action, owner, scope, key, fence, state, why, attempt,
     upstream_key, response)
SELECT resolved_at, resolved_by, action, owner, scope, key, fence, state, why, attempt,
       upstream_key, response
FROM _idem_migrating.resolutions;
-- The outcome counts (idem_metrics' *_total columns) go on from where they were. A row's
-- slot was a backend's process id; the extension's backends count in slots of their own
-- numbers, and idem_metrics sums every slot.
INSERT INTO idempotency.counts
    (owner, scope, slot, claimed, replay, in_progress, mismatch, refused, unrecorded,
     outcome_unknown)
SELECT owner, scope, slot, claimed, replay, in_progress, mismatch, refused, unrecorded,
       outcome_unknown
FROM _idem_migrating.counts;
INSERT INTO idempotency.policies
    (scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by,
     unresolved_ttl)
SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, updated_at, updated_by,
       unresolved_ttl
FROM _idem_migrating.policies;

-- Every fence handed out so far stays behind the extension's next one: a holder that
-- claimed before the move completes with its fence, and no fence is issued twice.
SELECT pg_catalog.setval('idempotency.fence_seq',
    GREATEST(s.last_value, (SELECT pg_catalog.max(fence) FROM _idem_migrating.records), 1))
FROM _idem_migrating.fence_seq AS s;

-- The limits do not move: in the extension they are the server's superuser settings of the
-- same names (postgresql.conf, ALTER SYSTEM), not a table. Where the portable install had
-- changed one, say so, with the setting to give it the same value.
DO $limits$
DECLARE
    changed text;
BEGIN
    -- (An install made by a development script of 0.2.0 may predate the table.)
    IF pg_catalog.to_regclass('_idem_migrating.settings') IS NULL THEN
        RETURN;
    END IF;
    SELECT pg_catalog.string_agg(pg_catalog.format('ALTER SYSTEM SET pg_idempotency.%s = %L;',
                                                   l.name, l.value), E'\n' ORDER BY l.name)
    INTO changed
    FROM _idem_migrating.settings AS s,
    LATERAL (VALUES
        ('max_key_bytes', s.max_key_bytes::text, s.max_key_bytes OPERATOR(pg_catalog.<>) 512),
        ('max_scope_bytes', s.max_scope_bytes::text, s.max_scope_bytes OPERATOR(pg_catalog.<>) 128),
        ('max_ttl', pg_catalog.ceil(_idem_migrating._idem_micros(s.max_ttl) OPERATOR(pg_catalog./) 1000000)::text || 's',
         s.max_ttl OPERATOR(pg_catalog.<>) interval '30 days'),
        ('max_response_bytes', s.max_response_bytes::text,
         s.max_response_bytes OPERATOR(pg_catalog.<>) 1048576)
    ) AS l(name, value, differs)
    WHERE l.differs;
    IF changed IS NOT NULL THEN
        RAISE WARNING 'the portable install''s limits were not the extension''s defaults'
            USING DETAIL = 'The extension reads its limits from the server''s settings; until '
                           'they are set, the defaults apply.',
                  HINT = 'As a superuser, to keep them:' || E'\n' || changed
                         || E'\nSELECT pg_reload_conf();';
    END IF;
END
$limits$;

DROP SCHEMA _idem_migrating CASCADE;

\if :_idem_own_transaction
COMMIT;
\endif
