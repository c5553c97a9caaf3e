#!/usr/bin/env bash
# Writes the SQL rendered from protocol/src/functions.rs (the one declaration of every SQL
# function): pg_idempotency/sql/functions.sql (the extension's functions, with the bodies in
# pg_idempotency/sql/bodies/) and sql/pg_idempotency.sql (the portable installer, around the
# hand-written parts and bodies in sql/src/). Run after changing any of them;
# tests/tests/consistency/signatures.rs fails while a rendered file is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -p pg_idempotency_protocol --bin render-sql
