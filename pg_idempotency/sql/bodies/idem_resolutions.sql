    SELECT * FROM idempotency._idem_resolution_rows($1)
