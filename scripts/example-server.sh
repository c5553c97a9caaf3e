#!/usr/bin/env bash
# The example HTTP service (server/examples/charges/): POST /charges (the charge and its
# remembered answer commit in one transaction) and POST /emails (a plain handler whose 4xx
# are remembered), both behind the idempotency layer. Sets up what is missing (PostgreSQL
# 18, the extension), starts the private cluster, makes a fresh database pgidem_example
# with the extension, prints requests to try, and serves on 127.0.0.1 until Ctrl-C.
#
#   scripts/example-server.sh [port]      (default 3000)
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

port="${1:-3000}"
db=pgidem_example

"$ROOT/scripts/setup.sh" pg18
# The build takes minutes: only when the staged extension is missing or of another version
# (scripts/install-extension.sh pg18 rebuilds it on purpose).
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
if ! grep -qx "default_version = '$version'" "$(cluster_dir pg18)/ext/extension/pg_idempotency.control" 2>/dev/null; then
    "$ROOT/scripts/install-extension.sh" pg18
fi
"$ROOT/scripts/cluster.sh" pg18 start
fresh_database pg18 "$db" extension

log "building the example service (server/examples/charges/)"
cargo build -q -p pg_idempotency_server --example charges

url="http://127.0.0.1:$port"
cat <<TRY

Try, from another terminal (the same key twice: one charge, the second answer replayed):

  curl -i -X POST $url/charges -H 'Authorization: Bearer tok-ann' \\
       -H 'Idempotency-Key: "charge-1"' -H 'Content-Type: application/json' -d '{"amount": 500, "currency": "eur"}'
  curl -i -X POST $url/charges -H 'Authorization: Bearer tok-ann' \\
       -H 'Idempotency-Key: "charge-1"' -H 'Content-Type: application/json' -d '{"amount": 500, "currency": "eur"}'

  # the same key with another body: 422 problem+json
  curl -i -X POST $url/charges -H 'Authorization: Bearer tok-ann' \\
       -H 'Idempotency-Key: "charge-1"' -H 'Content-Type: application/json' -d '{"amount": 501}'

  # another caller, the same key: a charge of its own
  curl -i -X POST $url/charges -H 'X-Api-Key: key-bob' \\
       -H 'Idempotency-Key: charge-1' -H 'Content-Type: application/json' -d '{"amount": 500}'

  # an email to a bad address: 422, and the retry gets the same 422 replayed
  curl -i -X POST $url/emails -H 'X-Api-Key: key-bob' \\
       -H 'Idempotency-Key: email-1' -H 'Content-Type: application/json' -d '{"to": "nobody"}'

  # no key: 400; no credential: 401
  curl -i -X POST $url/charges -H 'Authorization: Bearer tok-ann' -H 'Content-Type: application/json' -d '{"amount": 500}'
  curl -i -X POST $url/charges -H 'Idempotency-Key: k' -H 'Content-Type: application/json' -d '{"amount": 500}'

  # what was charged, and what is remembered
  PGDATABASE=$db scripts/cluster.sh pg18 psql -c 'SELECT * FROM charges'
  PGDATABASE=$db scripts/cluster.sh pg18 psql -c 'SELECT scope, key, state, attempt FROM idempotency.records'

TRY
exec cargo run -q -p pg_idempotency_server --example charges -- \
    --dsn "$(conninfo pg18) dbname=$db" --port "$port"
