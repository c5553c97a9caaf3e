    SELECT * FROM _idem_unresolved_rows($1)
