-- Each partition's rows, added up per owner and scope (a scope's keys are spread over
-- every partition): the live counts summed, the oldest running call the oldest of all.
-- The outcome counters are each server's (shared memory): partitions on one server report
-- the same ones, so they are added up once per server. A counter NULL everywhere (the
-- portable variant keeps none) stays NULL. Whose rows the partitions show is the caller's,
-- checked first as every keyed call's (idempotency._idem_proxied_caller, a one-time filter).
    WITH parts AS (
        SELECT * FROM idempotency._idem_metrics_all() WHERE idempotency._idem_proxied_caller()
    ), per_server AS (
        SELECT DISTINCT ON (p.owner, p.scope, p.server)
               p.owner, p.scope, p.claimed_total, p.replay_total, p.in_progress_total,
               p.mismatch_total
        FROM parts AS p
        ORDER BY p.owner, p.scope, p.server
    ), counters AS (
        SELECT c.owner, c.scope,
               pg_catalog.sum(c.claimed_total)::bigint AS claimed_total,
               pg_catalog.sum(c.replay_total)::bigint AS replay_total,
               pg_catalog.sum(c.in_progress_total)::bigint AS in_progress_total,
               pg_catalog.sum(c.mismatch_total)::bigint AS mismatch_total
        FROM per_server AS c
        GROUP BY c.owner, c.scope
    ), live AS (
        SELECT m.owner, m.scope,
               pg_catalog.sum(m.in_progress)::bigint AS in_progress,
               pg_catalog.sum(m.succeeded)::bigint AS succeeded,
               pg_catalog.sum(m.failed)::bigint AS failed,
               pg_catalog.sum(m.lapsed)::bigint AS lapsed,
               pg_catalog.sum(m.expired)::bigint AS expired,
               pg_catalog.max(m.oldest_in_progress) AS oldest_in_progress,
               pg_catalog.max(m.note) AS note
        FROM parts AS m
        GROUP BY m.owner, m.scope
    )
    SELECT l.owner, l.scope, l.in_progress, l.succeeded, l.failed, l.lapsed, l.expired,
           l.oldest_in_progress, c.claimed_total, c.replay_total, c.in_progress_total,
           c.mismatch_total, l.note
    FROM live AS l
    JOIN counters AS c ON c.owner IS NOT DISTINCT FROM l.owner AND c.scope = l.scope
    ORDER BY l.owner::text, l.scope
