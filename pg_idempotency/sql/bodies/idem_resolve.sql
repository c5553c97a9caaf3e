    SELECT idempotency._idem_resolve_one($1, $2, $3, $4, $5, $6, $7)
