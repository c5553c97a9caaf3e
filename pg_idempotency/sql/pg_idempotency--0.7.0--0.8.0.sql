-- pg_idempotency 0.7.0 -> 0.8.0 (ALTER EXTENSION pg_idempotency UPDATE).
--
-- Hand-written; fixed once 0.8.0 is released. tests/tests/consistency/upgrade.rs installs
-- each released version, fills it, updates, and compares every object with a fresh 0.8.0
-- install. Each change of 0.8.0 is one block below, starting with a comment line that
-- names it.
SET LOCAL search_path = pg_catalog, pg_temp;

-- 0.8.0: outcome counts per owner and scope in the counts table, for any number of scopes
-- (each backend its own row), instead of 512 pairs in shared memory: _idem_counters goes
-- (the library answers it with no rows until this update); idem_metrics gains
-- refused_total, unrecorded_total, outcome_unknown_total and folded_scopes (last), so it is
-- made again with a fresh install's privileges and comment.
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
SELECT pg_catalog.pg_extension_config_dump('idempotency.counts', '');

DROP FUNCTION @extschema@.idem_metrics();
DROP FUNCTION idempotency._idem_counters();
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
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress') AS in_progress,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'failed') AS failed,
               count(*) FILTER (WHERE r.expires_at > now.t AND r.state = 'in_progress'
                                  AND r.lease_until <= now.t) AS lapsed,
               count(*) FILTER (WHERE r.expires_at <= now.t) AS expired,
               now.t - min(r.created_at) FILTER (WHERE r.expires_at > now.t
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
REVOKE EXECUTE ON FUNCTION @extschema@.idem_metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@.idem_metrics() TO idempotency_user;
