    SELECT scope, ttl, lease, on_cache_hit, cache_failures, on_mismatch, unresolved_ttl,
           updated_at, updated_by
    FROM idempotency.policies ORDER BY scope
