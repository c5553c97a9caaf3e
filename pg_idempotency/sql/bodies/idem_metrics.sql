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
