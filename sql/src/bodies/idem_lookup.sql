    SELECT * FROM _idem_lookup($1, $2, $3)
