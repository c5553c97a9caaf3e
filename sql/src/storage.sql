-- The storage schema: the records, the policies, the fence sequence and the limits, reached
-- only through the API's functions; and the two roles the API is granted to.
CREATE SCHEMA :"storage";
REVOKE ALL ON SCHEMA :"storage" FROM PUBLIC;
COMMENT ON SCHEMA :"storage" IS
    'pg_idempotency storage (portable SQL variant): reached only through the idem_* functions';

-- Which release of the portable variant is installed: upgrade scripts check it.
CREATE TABLE :"storage".installed (
    version      text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
INSERT INTO :"storage".installed (version) VALUES ('0.9.0');

CREATE SEQUENCE :"storage".fence_seq AS bigint NO CYCLE;
COMMENT ON SEQUENCE :"storage".fence_seq IS 'pg_idempotency fencing tokens';

CREATE TABLE :"storage".records (
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
    -- Until when a record whose outcome is unknown is kept past its ttl (expires_at): a
    -- claim's lease end plus its unresolved bound (a lapsed claim is then taken over, never
    -- claimed afresh), or a mark's completion plus that bound. NULL for a result, and for
    -- records claimed before 0.8.0. A record is live while either time is ahead.
    unresolved_until timestamptz,
    -- The length of the lease the holder last took (its claim, a takeover, its last
    -- idem_extend): with less than a third of it left, the holder has stopped beating
    -- (the client's heartbeat renews every third), and a duplicate is told the lease's time
    -- left and ends its wait. NULL for records claimed before 0.9.0.
    lease_length interval,
    -- Each role its own key space: the same scope and key under two roles are two calls.
    PRIMARY KEY (scope, key, owner)
) WITH (
    -- As in the extension: completions stay HOT updates, and vacuum keeps pace with purges.
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);
COMMENT ON TABLE :"storage".records IS
    'pg_idempotency: one row per (scope, key, owner); expired rows are absent whether purged or not';

-- Who resolved which unresolved record, when, how, and the record as it stood before
-- (idem_resolve): read through idem_resolutions.
CREATE TABLE :"storage".resolutions (
    resolved_at  timestamptz NOT NULL,
    resolved_by  regrole     NOT NULL,
    action       text        NOT NULL
                 CHECK (action IN ('succeeded', 'failed', 'release', 'forget')),
    owner        regrole     NOT NULL,
    scope        text        NOT NULL,
    key          text        NOT NULL,
    fence        bigint      NOT NULL,
    state        text        NOT NULL,
    why          text        NOT NULL,
    attempt      integer     NOT NULL,
    upstream_key uuid        NOT NULL,
    response     jsonb
);
COMMENT ON TABLE :"storage".resolutions IS
    'pg_idempotency: who resolved an unresolved record, when, how, and the record before';

CREATE TABLE :"storage".policies (
    scope          text        PRIMARY KEY,
    ttl            interval,
    lease          interval,
    on_cache_hit   text        CHECK (on_cache_hit IN ('return_cached', 'return_cached_if_success', 'fail_fast')),
    cache_failures boolean,
    on_mismatch    text        CHECK (on_mismatch IN ('reject', 'ignore')),
    updated_at     timestamptz NOT NULL,
    updated_by     regrole     NOT NULL,
    -- How long past its ttl a record of the scope whose outcome is unknown is kept (0.8.0).
    unresolved_ttl interval
);
COMMENT ON TABLE :"storage".policies IS 'pg_idempotency: per-scope defaults';

-- Outcome counts per owner and scope, for idem_metrics()'s *_total columns: durable, with
-- no bound on the number of scopes (docs/decisions.md, "Counts that never fold"). Each
-- backend adds to its own row of a scope (slot: the backend's process id), so callers of one scope never
-- wait on each other's row, however long the transactions they count in.
CREATE TABLE :"storage".counts (
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
COMMENT ON TABLE :"storage".counts IS
    'pg_idempotency: outcome counts per owner, scope and backend, summed by idem_metrics()';

-- The limits that bound what a call may store (the extension's superuser-only settings of
-- the same names). A custom setting would be any role's to SET for its own session, so
-- they live here, out of reach of the roles that call the API: the table's owner (the
-- installing role) or a superuser changes them with UPDATE. One row, read once per call;
-- the defaults are the extension's. The ranges are the extension's too: the trigger below
-- refuses a bad value with our messages, the CHECKs hold even where triggers are off.
CREATE TABLE :"storage".settings (
    one                boolean  PRIMARY KEY DEFAULT true CHECK (one),
    max_key_bytes      integer  NOT NULL DEFAULT 512
                       CHECK (max_key_bytes BETWEEN 1 AND 2048),
    max_scope_bytes    integer  NOT NULL DEFAULT 128
                       CHECK (max_scope_bytes BETWEEN 1 AND 512),
    max_ttl            interval NOT NULL DEFAULT '30 days'
                       CHECK (max_ttl >= '1 second' AND max_ttl <= '2147483647 seconds'),
    max_response_bytes integer  NOT NULL DEFAULT 1048576
                       CHECK (max_response_bytes >= 0)
);
COMMENT ON TABLE :"storage".settings IS
    'pg_idempotency limits (max_key_bytes, max_scope_bytes, max_ttl, max_response_bytes): one row, changed by its owner or a superuser';

-- The roles the docs name: members of idempotency_user call the API on their own records;
-- members of idempotency_admin may also see and forget every role's records, read every
-- role's metrics, purge and set policies. Creating them needs CREATEROLE; where they exist
-- already (a second database, or made by an administrator beforehand) they are used as
-- they are.
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
