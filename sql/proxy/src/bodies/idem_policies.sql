-- Every partition keeps every policy; each scope's newest, once.
    SELECT DISTINCT ON (p.scope)
           p.scope, p.ttl, p.lease, p.on_cache_hit, p.cache_failures, p.on_mismatch,
           p.unresolved_ttl, p.updated_at, p.updated_by
    FROM idempotency._idem_policies_all() AS p
    ORDER BY p.scope, p.updated_at DESC
