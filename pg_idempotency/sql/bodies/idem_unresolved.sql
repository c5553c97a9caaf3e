    SELECT * FROM idempotency._idem_unresolved_rows($1)
