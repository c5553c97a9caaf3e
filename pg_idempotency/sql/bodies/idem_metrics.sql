    WITH now AS (SELECT clock_timestamp() AS t, idempotency._idem_visible_owner() AS visible),
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
        WHERE now.visible IS NULL OR r.owner = now.visible
        GROUP BY r.owner, r.scope, now.t),
    counted AS (
        SELECT c.* FROM idempotency._idem_counters() c, now
        WHERE now.visible IS NULL OR c.owner = now.visible)
    SELECT coalesce(s.owner, c.owner), coalesce(s.scope, c.scope),
           coalesce(s.in_progress, 0), coalesce(s.succeeded, 0), coalesce(s.failed, 0),
           coalesce(s.lapsed, 0), coalesce(s.expired, 0), s.oldest_in_progress,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.claimed, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.replay, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.in_progress, 0) END,
           CASE WHEN idempotency._idem_counting() THEN coalesce(c.mismatch, 0) END,
           CASE WHEN NOT idempotency._idem_counting() THEN
               'outcome counters are off: pg_idempotency is not in shared_preload_libraries (add it and restart the server)'
           END
    FROM stored s FULL JOIN counted c ON c.owner = s.owner AND c.scope = s.scope
    ORDER BY coalesce(s.owner, c.owner)::text, 2
