-- Per owner and scope: a role sees its own rows, a role with idempotency_admin's privileges
-- every owner's. The outcome counters live in the extension's shared memory; the portable
-- variant has none, so they are NULL here (as in the extension when it is not preloaded).
    WITH now AS (SELECT clock_timestamp() AS t, _idem_visible_owner() AS visible)
    SELECT r.owner, r.scope,
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'),
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'succeeded'),
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'failed'),
           count(*) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t) AND r.state = 'in_progress'
                              AND r.lease_until <= now.t),
           count(*) FILTER (WHERE r.expires_at <= now.t AND coalesce(r.unresolved_until <= now.t, true)),
           now.t - min(r.created_at) FILTER (WHERE (r.expires_at > now.t OR r.unresolved_until > now.t)
                                              AND r.state = 'in_progress'),
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
           'outcome counters are off: the portable variant keeps none (the extension, preloaded, counts them)'
    FROM records r, now
    WHERE now.visible IS NULL OR r.owner = now.visible
    GROUP BY r.owner, r.scope, now.t
    ORDER BY r.owner::text, r.scope
