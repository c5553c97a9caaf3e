-- Each partition's rows, added up per owner and scope (a scope's keys are spread over
-- every partition): the live counts and the outcome counts summed (from 0.8.0 each
-- partition keeps its own outcome counts, in its counts table), the oldest running call
-- the oldest of all. A partition's '(other scopes)' rows (its metrics_scope_limit) add up
-- like any scope's. Whose rows the partitions show is the caller's, checked first as
-- every keyed call's (idempotency._idem_proxied_caller, a one-time filter).
    WITH parts AS (
        SELECT * FROM idempotency._idem_metrics_all() WHERE idempotency._idem_proxied_caller()
    )
    SELECT m.owner, m.scope,
           pg_catalog.sum(m.in_progress)::bigint,
           pg_catalog.sum(m.succeeded)::bigint,
           pg_catalog.sum(m.failed)::bigint,
           pg_catalog.sum(m.lapsed)::bigint,
           pg_catalog.sum(m.expired)::bigint,
           pg_catalog.max(m.oldest_in_progress),
           pg_catalog.sum(m.claimed_total)::bigint,
           pg_catalog.sum(m.replay_total)::bigint,
           pg_catalog.sum(m.in_progress_total)::bigint,
           pg_catalog.sum(m.mismatch_total)::bigint,
           pg_catalog.max(m.note),
           pg_catalog.sum(m.refused_total)::bigint,
           pg_catalog.sum(m.unrecorded_total)::bigint,
           pg_catalog.sum(m.outcome_unknown_total)::bigint,
           pg_catalog.sum(m.folded_scopes)::bigint
    FROM parts AS m
    GROUP BY m.owner, m.scope
    ORDER BY m.owner::text, m.scope
