#!/usr/bin/env bash
# Writes pg_idempotency/sql/functions.sql from protocol/src/functions.rs (the one
# declaration of every SQL function). Run after changing a declaration or a body in
# pg_idempotency/sql/bodies/; tests/tests/signatures.rs fails while the file is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -p pg_idempotency_protocol --bin render-sql
echo "wrote pg_idempotency/sql/functions.sql"
