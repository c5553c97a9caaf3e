-- pg_idempotency: the SQL API's functions and who may call them.
--
-- Generated from protocol/src/functions.rs by cargo xtask render-sql: edit the declaration
-- there, not this file (tests/tests/consistency/signatures.rs fails when the two
-- differ). The bodies of the SQL functions are in sql/bodies/.

-- unresolved_ttl NULL: pg_idempotency.unresolved_ttl. How long past its ttl a record whose outcome is unknown (a lapsed claim, a mark) is kept for an operator.
CREATE FUNCTION @extschema@.idem_begin(
    scope          text,
    key            text,
    request        jsonb DEFAULT NULL,
    ttl            interval DEFAULT NULL,
    lease          interval DEFAULT NULL,
    on_cache_hit   text DEFAULT NULL,
    on_mismatch    text DEFAULT NULL,
    wait           interval DEFAULT '0',
    claim_token    uuid DEFAULT NULL,
    unresolved_ttl interval DEFAULT NULL)
RETURNS idempotency.begin_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin';
COMMENT ON FUNCTION @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval) IS
    'Claim a call (outcome claimed, with a fence), or learn it is running (in_progress), or get its remembered result (replay)';

CREATE FUNCTION @extschema@.idem_complete(
    scope         text,
    key           text,
    fence         bigint,
    response      jsonb,
    succeeded     boolean DEFAULT true,
    cache_failure boolean DEFAULT NULL)
RETURNS idempotency.complete_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_complete';
COMMENT ON FUNCTION @extschema@.idem_complete(text, text, bigint, jsonb, boolean, boolean) IS
    'Record the result of a claimed call; the fence must still hold the record';

-- keys[i], requests[i] and claim_tokens[i] are item i (a NULL key: derived from its request). Items are claimed in key order, answered in item order; a mismatch or a refused repeat is that item's outcome, a bad argument fails the whole batch.
CREATE FUNCTION @extschema@.idem_begin_batch(
    scope        text,
    keys         text[],
    requests     jsonb[] DEFAULT NULL,
    ttl          interval DEFAULT NULL,
    lease        interval DEFAULT NULL,
    on_cache_hit text DEFAULT NULL,
    on_mismatch  text DEFAULT NULL,
    claim_tokens uuid[] DEFAULT NULL)
RETURNS TABLE (
    item         integer,
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
    key          text)
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_begin_batch';
COMMENT ON FUNCTION @extschema@.idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]) IS
    'idem_begin for many calls of one scope in one round trip: one row per item (claimed, replay, in_progress, mismatch or refused)';

-- Item i is (keys[i], fences[i], responses[i], succeeded[i], cache_failure[i]); succeeded NULL: every item succeeded. A lost lease is that item's outcome (lease_lost); the others are completed.
CREATE FUNCTION @extschema@.idem_complete_batch(
    scope         text,
    keys          text[],
    fences        bigint[],
    responses     jsonb[],
    succeeded     boolean[] DEFAULT NULL,
    cache_failure boolean[] DEFAULT NULL)
RETURNS TABLE (
    item       integer,
    key        text,
    outcome    text,
    state      text,
    expires_at timestamptz)
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_complete_batch';
COMMENT ON FUNCTION @extschema@.idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[]) IS
    'idem_complete for many claims of one scope in one round trip: one row per item (completed, with the state left, or lease_lost)';

CREATE FUNCTION @extschema@.idem_release(
    scope text,
    key   text,
    fence bigint)
RETURNS void
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_release';
COMMENT ON FUNCTION @extschema@.idem_release(text, text, bigint) IS
    'Give up a claim without a result, so that the next idem_begin claims the call';

CREATE FUNCTION @extschema@.idem_extend(
    scope text,
    key   text,
    fence bigint,
    lease interval DEFAULT NULL)
RETURNS idempotency.extend_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_extend';
COMMENT ON FUNCTION @extschema@.idem_extend(text, text, bigint, interval) IS
    'Extend the lease of a claim that is still running (a heartbeat)';

-- owner NULL: the caller's own record. Naming another role needs idempotency_admin.
CREATE FUNCTION @extschema@.idem_lookup(
    scope text,
    key   text,
    owner regrole DEFAULT NULL)
RETURNS SETOF idempotency.lookup_result
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER ROWS 1
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_lookup';
COMMENT ON FUNCTION @extschema@.idem_lookup(text, text, regrole) IS
    'The caller''s record of a call (an admin: owner''s) until it expires; no row when it is absent or expired';

CREATE FUNCTION @extschema@.idem_forget(
    scope text,
    key   text,
    owner regrole DEFAULT NULL)
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_forget';
COMMENT ON FUNCTION @extschema@.idem_forget(text, text, regrole) IS
    'Remove the caller''s record (an admin: owner''s), e.g. a bad cached result; true when a live one was removed';

CREATE FUNCTION @extschema@.idem_canonical(
    request jsonb)
RETURNS text
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_canonical';
COMMENT ON FUNCTION @extschema@.idem_canonical(jsonb) IS
    'Canonical JSON of a request: RFC 8785 with lossless numbers (what idem_hash hashes)';

CREATE FUNCTION @extschema@.idem_hash(
    request jsonb)
RETURNS bytea
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_hash';
COMMENT ON FUNCTION @extschema@.idem_hash(jsonb) IS
    'SHA-256 of the canonical JSON of a request: its fingerprint; as lowercase hex, its HASH_INPUT key';

-- batch_size NULL: pg_idempotency.purge_batch_size, as the purge worker uses.
CREATE FUNCTION @extschema@.idem_purge_expired(
    batch_size integer DEFAULT NULL)
RETURNS bigint
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_purge_expired';
COMMENT ON FUNCTION @extschema@.idem_purge_expired(integer) IS
    'Delete the rows of expired records, batch_size at a time; returns how many (never a live record)';

-- INOUT: the policy comes back as stored (durations normalised).
CREATE FUNCTION @extschema@.idem_set_policy(
    INOUT scope          text,
    INOUT ttl            interval DEFAULT NULL,
    INOUT lease          interval DEFAULT NULL,
    INOUT on_cache_hit   text DEFAULT NULL,
    INOUT cache_failures boolean DEFAULT NULL,
    INOUT on_mismatch    text DEFAULT NULL,
    INOUT unresolved_ttl interval DEFAULT NULL,
    OUT   updated_at timestamptz,
    OUT   updated_by regrole)
RETURNS record
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_set_policy';
COMMENT ON FUNCTION @extschema@.idem_set_policy(text, interval, interval, text, boolean, text, interval) IS
    'Set (replace) the policy of a scope: the defaults every caller of that scope obeys';

CREATE FUNCTION @extschema@.idem_drop_policy(
    scope text)
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_drop_policy';
COMMENT ON FUNCTION @extschema@.idem_drop_policy(text) IS
    'Remove the policy of a scope; true when it had one';

CREATE FUNCTION @extschema@.idem_policies()
RETURNS TABLE (
    scope          text,
    ttl            interval,
    lease          interval,
    on_cache_hit   text,
    cache_failures boolean,
    on_mismatch    text,
    unresolved_ttl interval,
    updated_at     timestamptz,
    updated_by     regrole)
STABLE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, unresolved_ttl,
           updated_at, updated_by
    FROM idempotency.policies ORDER BY scope
$fn$;
COMMENT ON FUNCTION @extschema@.idem_policies() IS
    'Every scope''s policy';

CREATE FUNCTION idempotency._idem_counting()
RETURNS boolean
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_counting';

-- NULL: every owner's (the caller has idempotency_admin's privileges); else the caller.
CREATE FUNCTION idempotency._idem_visible_owner()
RETURNS regrole
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idem_visible_owner';

CREATE FUNCTION @extschema@.idem_metrics()
RETURNS TABLE (
    owner                 regrole,
    scope                 text,
    in_progress           bigint,
    succeeded             bigint,
    failed                bigint,
    lapsed                bigint,
    expired               bigint,
    oldest_in_progress    interval,
    claimed_total         bigint,
    replay_total          bigint,
    in_progress_total     bigint,
    mismatch_total        bigint,
    note                  text,
    refused_total         bigint,
    unrecorded_total      bigint,
    outcome_unknown_total bigint,
    folded_scopes         bigint)
VOLATILE CALLED ON NULL INPUT PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    WITH now AS (SELECT clock_timestamp() AS t, idempotency._idem_visible_owner() AS visible,
                        coalesce(nullif(pg_catalog.current_setting('pg_idempotency.metrics_scope_limit', true), ''), '0')::bigint AS top,
                        coalesce(nullif(pg_catalog.current_setting('pg_idempotency.metrics_records', true), ''), '1')::integer = 1 AS scan),
    stored AS (
        SELECT r.owner, r.scope,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t AND COALESCE(r.unresolved_until <= now.t, true)) AS expired,
               now.t - min(r.created_at) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t)
                                                  AND r.state = 'in_progress') AS oldest_in_progress
        FROM idempotency.records r, now
        -- A one-time filter: with metrics_records = 0 the records are not read at all.
        WHERE coalesce(nullif(pg_catalog.current_setting('pg_idempotency.metrics_records', true), ''), '1')::integer = 1
          AND (now.visible IS NULL OR r.owner = now.visible)
        GROUP BY r.owner, r.scope, now.t),
    counted AS (
        SELECT c.owner, c.scope, sum(c.claimed)::bigint AS claimed, sum(c.replay)::bigint AS replay,
               sum(c.in_progress)::bigint AS in_progress, sum(c.mismatch)::bigint AS mismatch,
               sum(c.refused)::bigint AS refused, sum(c.unrecorded)::bigint AS unrecorded,
               sum(c.outcome_unknown)::bigint AS outcome_unknown
        FROM idempotency.counts c, now
        WHERE now.visible IS NULL OR c.owner = now.visible
        GROUP BY c.owner, c.scope),
    joined AS (
        SELECT coalesce(s.owner, c.owner) AS owner, coalesce(s.scope, c.scope) AS scope,
               CASE WHEN now.scan THEN coalesce(s.in_progress, 0) END AS in_progress, CASE WHEN now.scan THEN coalesce(s.succeeded, 0) END AS succeeded,
               CASE WHEN now.scan THEN coalesce(s.failed, 0) END AS failed, CASE WHEN now.scan THEN coalesce(s.lapsed, 0) END AS lapsed,
               CASE WHEN now.scan THEN coalesce(s.expired, 0) END AS expired, s.oldest_in_progress,
               coalesce(c.claimed, 0) AS claimed, coalesce(c.replay, 0) AS replay,
               coalesce(c.in_progress, 0) AS in_progress_total, coalesce(c.mismatch, 0) AS mismatch,
               coalesce(c.refused, 0) AS refused, coalesce(c.unrecorded, 0) AS unrecorded,
               coalesce(c.outcome_unknown, 0) AS outcome_unknown
        FROM stored s FULL JOIN counted c ON c.owner = s.owner AND c.scope = s.scope, now),
    -- With metrics_scope_limit set, the busiest pairs keep their rows; the rest of each
    -- owner fold into one row, '(other scopes)', whose folded_scopes says how many.
    ranked AS (
        SELECT j.*, now.top > 0 AND row_number() OVER (
                   ORDER BY j.claimed + j.replay + j.in_progress_total + j.mismatch + j.refused
                            + coalesce(j.in_progress + j.succeeded + j.failed + j.expired, 0) DESC,
                            j.owner::text, j.scope) > now.top AS folded
        FROM joined j, now)
    SELECT * FROM (
    SELECT owner, scope, in_progress, succeeded, failed, lapsed, expired, oldest_in_progress,
           claimed, replay, in_progress_total, mismatch, CASE WHEN NOT idempotency._idem_counting() THEN
               'this session counts no outcomes: pg_idempotency.count_outcomes = 0'
           WHEN NOT (SELECT scan FROM now) THEN
               'records not read (pg_idempotency.metrics_records = 0): their columns are NULL' END, refused, unrecorded,
           outcome_unknown, 0::bigint AS folded_scopes
    FROM ranked WHERE NOT folded
    UNION ALL
    SELECT owner, '(other scopes)', sum(in_progress)::bigint, sum(succeeded)::bigint,
           sum(failed)::bigint, sum(lapsed)::bigint, sum(expired)::bigint, max(oldest_in_progress),
           sum(claimed)::bigint, sum(replay)::bigint, sum(in_progress_total)::bigint,
           sum(mismatch)::bigint, CASE WHEN NOT idempotency._idem_counting() THEN
               'this session counts no outcomes: pg_idempotency.count_outcomes = 0'
           WHEN NOT (SELECT scan FROM now) THEN
               'records not read (pg_idempotency.metrics_records = 0): their columns are NULL' END, sum(refused)::bigint, sum(unrecorded)::bigint,
           sum(outcome_unknown)::bigint, count(*)
    FROM ranked WHERE folded
    GROUP BY owner) AS m
    ORDER BY m.owner::text, m.scope
$fn$;
COMMENT ON FUNCTION @extschema@.idem_metrics() IS
    'Per owner and scope (a role: its own; an admin: every owner): live records by state, lapsed leases, expired rows not yet purged, the oldest running claim, and durable outcome counts (claims, replays, running, refusals, the client''s marks); past pg_idempotency.metrics_scope_limit rows, the rest fold into ''(other scopes)'' rows that say how many they hold';

-- owner NULL: the caller's own records (an admin: every owner's). Naming another role needs idempotency_admin.
CREATE FUNCTION @extschema@.idem_unresolved(
    owner regrole DEFAULT NULL)
RETURNS SETOF idempotency.unresolved_record
STABLE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 100
LANGUAGE sql AS $fn$
    SELECT * FROM idempotency._idem_unresolved_rows($1)
$fn$;
COMMENT ON FUNCTION @extschema@.idem_unresolved(regrole) IS
    'The records awaiting an operator''s decision: a claim whose lease lapsed, or a mark (outcome_unknown, unrecorded); kept past their ttl until resolved or until their unresolved bound';

-- action: succeeded or failed (record the result found), release (the next call runs again) or forget. fence and state as idem_unresolved listed them: a record that changed since is refused (IK003).
CREATE FUNCTION @extschema@.idem_resolve(
    scope    text,
    key      text,
    fence    bigint,
    state    text,
    action   text,
    response jsonb DEFAULT NULL,
    owner    regrole DEFAULT NULL)
RETURNS text
VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
LANGUAGE sql AS $fn$
    SELECT idempotency._idem_resolve_one($1, $2, $3, $4, $5, $6, $7)
$fn$;
COMMENT ON FUNCTION @extschema@.idem_resolve(text, text, bigint, text, text, jsonb, regrole) IS
    'Settle a record awaiting a decision (as idem_unresolved listed it) and write who did it into the audit; answers the state left (succeeded, failed or absent)';

-- owner NULL: the caller's own records' (an admin: every owner's).
CREATE FUNCTION @extschema@.idem_resolutions(
    owner regrole DEFAULT NULL)
RETURNS SETOF idempotency.resolutions
STABLE CALLED ON NULL INPUT PARALLEL UNSAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp ROWS 100
LANGUAGE sql AS $fn$
    SELECT * FROM idempotency._idem_resolution_rows($1)
$fn$;
COMMENT ON FUNCTION @extschema@.idem_resolutions(regrole) IS
    'The audit of idem_resolve: who resolved which record, when, how, and the record before, newest first';

-- Execute is granted deliberately, never to PUBLIC.
REVOKE EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    @extschema@.idem_complete(text, text, bigint, jsonb, boolean, boolean),
    @extschema@.idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    @extschema@.idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[]),
    @extschema@.idem_release(text, text, bigint),
    @extschema@.idem_extend(text, text, bigint, interval),
    @extschema@.idem_lookup(text, text, regrole),
    @extschema@.idem_forget(text, text, regrole),
    @extschema@.idem_canonical(jsonb),
    @extschema@.idem_hash(jsonb),
    @extschema@.idem_purge_expired(integer),
    @extschema@.idem_set_policy(text, interval, interval, text, boolean, text, interval),
    @extschema@.idem_drop_policy(text),
    @extschema@.idem_policies(),
    idempotency._idem_counting(),
    idempotency._idem_visible_owner(),
    @extschema@.idem_metrics(),
    @extschema@.idem_unresolved(regrole),
    @extschema@.idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    @extschema@.idem_resolutions(regrole)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_begin(text, text, jsonb, interval, interval, text, text, interval, uuid, interval),
    @extschema@.idem_complete(text, text, bigint, jsonb, boolean, boolean),
    @extschema@.idem_begin_batch(text, text[], jsonb[], interval, interval, text, text, uuid[]),
    @extschema@.idem_complete_batch(text, text[], bigint[], jsonb[], boolean[], boolean[]),
    @extschema@.idem_release(text, text, bigint),
    @extschema@.idem_extend(text, text, bigint, interval),
    @extschema@.idem_lookup(text, text, regrole),
    @extschema@.idem_forget(text, text, regrole),
    @extschema@.idem_canonical(jsonb),
    @extschema@.idem_hash(jsonb),
    @extschema@.idem_policies(),
    @extschema@.idem_metrics(),
    @extschema@.idem_unresolved(regrole),
    @extschema@.idem_resolve(text, text, bigint, text, text, jsonb, regrole),
    @extschema@.idem_resolutions(regrole)
TO idempotency_user;
GRANT EXECUTE ON FUNCTION
    @extschema@.idem_purge_expired(integer),
    @extschema@.idem_set_policy(text, interval, interval, text, boolean, text, interval),
    @extschema@.idem_drop_policy(text)
TO idempotency_admin;
