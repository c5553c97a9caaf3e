-- Dropped on every partition: true when any of them had it.
    SELECT COALESCE(pg_catalog.bool_or(d), false)
    FROM idempotency._idem_drop_policy_all(scope) AS d
