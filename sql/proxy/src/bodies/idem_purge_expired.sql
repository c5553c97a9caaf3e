-- Each partition purges its own expired records; the proxy adds up how many.
    SELECT COALESCE(pg_catalog.sum(n), 0)::bigint
    FROM idempotency._idem_purge_expired_all(batch_size) AS n
