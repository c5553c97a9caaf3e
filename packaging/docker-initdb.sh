#!/bin/sh
# Run once by the official image's entrypoint, on an empty data folder, against a server
# it starts for initialisation and restarts afterwards: creates the extension in
# POSTGRES_DB and makes it the purge worker's database (pg_idempotency.database, read when
# the server starts, so from the restart on).
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v db="$POSTGRES_DB" <<'EOSQL'
CREATE EXTENSION IF NOT EXISTS pg_idempotency;
ALTER SYSTEM SET pg_idempotency.database = :'db';
EOSQL
