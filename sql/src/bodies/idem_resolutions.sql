    SELECT * FROM _idem_resolution_rows($1)
