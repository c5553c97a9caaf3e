-- pg_idempotency: storage (schema, tables, fences, roles, result types). The functions
-- follow in functions.sql.
--
-- Hygiene: nothing below depends on the installer's search_path; the storage schema is
-- created plainly, so a schema of that name made by someone else makes the install fail
-- instead of being adopted.
SET LOCAL search_path = pg_catalog, pg_temp;

CREATE SCHEMA idempotency;
REVOKE ALL ON SCHEMA idempotency FROM PUBLIC;
COMMENT ON SCHEMA idempotency IS
    'pg_idempotency storage: reached only through the idem_* functions';

-- Fences for every claim of every key. Never cycles, so a fence is never handed out twice.
CREATE SEQUENCE idempotency.fence_seq AS bigint NO CYCLE;
COMMENT ON SEQUENCE idempotency.fence_seq IS 'pg_idempotency fencing tokens';

CREATE TABLE idempotency.records (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    state        text        NOT NULL
                 CHECK (state IN ('in_progress', 'succeeded', 'failed')),
    fence        bigint      NOT NULL,
    attempt      integer     NOT NULL CHECK (attempt > 0),
    fingerprint  bytea,
    upstream_key uuid        NOT NULL,
    response     jsonb,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz,
    lease_until  timestamptz,
    expires_at   timestamptz NOT NULL,
    ttl          interval    NOT NULL,
    owner        regrole     NOT NULL,
    -- The claim holding the record: the caller's token for that attempt (a repeat of the
    -- same idem_begin gets the claim back) and whether it took over a lapsed lease.
    claim_token  uuid,
    recovered    boolean     NOT NULL DEFAULT false,
    -- When the running attempt claimed (a takeover's own time): retry_after counts the
    -- running call's time from it. NULL for records claimed before 0.5.0.
    claimed_at   timestamptz,
    -- Each role its own key space: the same scope and key under two roles are two calls.
    PRIMARY KEY (scope, key, owner)
) WITH (
    -- Room on each page for a record's completion to be a HOT update (no index is
    -- touched: the only index is the key's, which never changes).
    fillfactor = 80,
    -- Purges delete in bulk and keys churn: vacuum early so freed space is reused
    -- before the table grows.
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    -- A vacuum of this table must finish before the next ttl's worth of rows expires.
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE idempotency.records IS
    'pg_idempotency: one row per (scope, key, owner); expired rows are absent whether purged or not';

-- Per-scope defaults, set with idem_set_policy: a call's arguments override them, and they
-- override the GUC defaults. A NULL field leaves that setting to the defaults.
CREATE TABLE idempotency.policies (
    scope          text        PRIMARY KEY,
    ttl            interval,
    lease          interval,
    on_cache_hit   text        CHECK (on_cache_hit IN ('return_cached', 'return_cached_if_success', 'fail_fast')),
    cache_failures boolean,
    on_mismatch    text        CHECK (on_mismatch IN ('reject', 'ignore')),
    updated_at     timestamptz NOT NULL,
    updated_by     regrole     NOT NULL
);
COMMENT ON TABLE idempotency.policies IS 'pg_idempotency: per-scope defaults';

-- Outcome counts per owner and scope, for idem_metrics()'s *_total columns: durable, with
-- no bound on the number of scopes (docs/decisions.md, "Counts that never fold"). Each
-- backend adds to its own row of a scope (slot: the backend's number), so callers of one scope never
-- wait on each other's row, however long the transactions they count in.
CREATE TABLE idempotency.counts (
    owner           regrole NOT NULL,
    scope           text    NOT NULL,
    slot            integer NOT NULL,
    claimed         bigint  NOT NULL DEFAULT 0,
    replay          bigint  NOT NULL DEFAULT 0,
    in_progress     bigint  NOT NULL DEFAULT 0,
    mismatch        bigint  NOT NULL DEFAULT 0,
    refused         bigint  NOT NULL DEFAULT 0,
    unrecorded      bigint  NOT NULL DEFAULT 0,
    outcome_unknown bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (owner, scope, slot)
) WITH (fillfactor = 70);
COMMENT ON TABLE idempotency.counts IS
    'pg_idempotency: outcome counts per owner, scope and backend, summed by idem_metrics()';

-- Records, policies and fences come back with pg_dump / pg_restore.
SELECT pg_catalog.pg_extension_config_dump('idempotency.policies', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.records', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.fence_seq', '');
SELECT pg_catalog.pg_extension_config_dump('idempotency.counts', '');

-- Roles that the docs name: members of idempotency_user may call the API on their own
-- records; members of idempotency_admin may also see and forget every role's records,
-- read every role's metrics, purge and set policies. Roles
-- belong to the cluster, not to one database, so they are created only where missing and
-- outlive the extension.
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

-- Result rows are named composite types rather than OUT parameters: PostgreSQL builds the
-- row type of a call in FROM from the type cache then, not from the function's argument
-- arrays on every execution (about 4 us a call, measured in docs/benchmarks.md).
CREATE TYPE idempotency.begin_result AS (
    outcome      text,
    fence        bigint,
    attempt      integer,
    recovered    boolean,
    upstream_key uuid,
    succeeded    boolean,
    response     jsonb,
    lease_until  timestamptz,
    expires_at   timestamptz,
    retry_after  interval,
    key          text);
COMMENT ON TYPE idempotency.begin_result IS 'What idem_begin answers';
CREATE TYPE idempotency.complete_result AS (state text, expires_at timestamptz);
COMMENT ON TYPE idempotency.complete_result IS 'What idem_complete answers';
CREATE TYPE idempotency.extend_result AS (lease_until timestamptz, expires_at timestamptz);
COMMENT ON TYPE idempotency.extend_result IS 'What idem_extend answers';
CREATE TYPE idempotency.lookup_result AS (
    scope        text,
    key          text,
    state        text,
    fence        bigint,
    attempt      integer,
    fingerprint  bytea,
    upstream_key uuid,
    response     jsonb,
    created_at   timestamptz,
    completed_at timestamptz,
    lease_until  timestamptz,
    expires_at   timestamptz,
    ttl          interval,
    owner        regrole);
COMMENT ON TYPE idempotency.lookup_result IS 'A record as idem_lookup shows it';

