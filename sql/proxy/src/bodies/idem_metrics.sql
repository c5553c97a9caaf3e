-- Each partition's rows, added up per owner and scope (a scope's keys are spread over
-- every partition): counts and counters summed, the oldest running call the oldest of
-- all. A counter NULL on every partition (the portable variant keeps none) stays NULL.
    SELECT m.owner, m.scope,
           pg_catalog.sum(m.in_progress)::bigint, pg_catalog.sum(m.succeeded)::bigint,
           pg_catalog.sum(m.failed)::bigint, pg_catalog.sum(m.lapsed)::bigint,
           pg_catalog.sum(m.expired)::bigint, pg_catalog.max(m.oldest_in_progress),
           pg_catalog.sum(m.claimed_total)::bigint, pg_catalog.sum(m.replay_total)::bigint,
           pg_catalog.sum(m.in_progress_total)::bigint,
           pg_catalog.sum(m.mismatch_total)::bigint, pg_catalog.max(m.note)
    FROM idempotency._idem_metrics_all() AS m
    GROUP BY m.owner, m.scope
    ORDER BY m.owner::text, m.scope
