-- Every partition keeps every scope's policy, since a scope's keys are on all of them.
-- They store the same policy; the answer is the last partition's to store it.
    SELECT p.scope, p.ttl, p.lease, p.on_cache_hit, p.cache_failures, p.on_mismatch,
           p.unresolved_ttl, p.updated_at, p.updated_by
    FROM idempotency._idem_set_policy_all(scope, ttl, lease, on_cache_hit, cache_failures,
                                          on_mismatch, unresolved_ttl) AS p
    ORDER BY p.updated_at DESC
    LIMIT 1
