#!/usr/bin/env bash
# The README's benchmark command: sets up what is missing, installs the extension into the
# private PostgreSQL 18 cluster, runs every benchmark workload beside its baseline, and
# writes docs/benchmarks.md.
#
#   scripts/bench.sh            the full run (a few minutes)
#   scripts/bench.sh --smoke    tiny counts, to check that the harness works
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

smoke=()
out="$ROOT/docs/benchmarks.md"
if [ "${1:-}" = --smoke ]; then smoke=(--smoke); out="$TARGET/benchmarks-smoke.md"; fi

"$ROOT/scripts/setup.sh" pg18
"$ROOT/scripts/install-extension.sh" pg18
"$ROOT/scripts/cluster.sh" pg18 start
bin=$(bindir_of pg18)
"$bin/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo pg18) dbname=postgres" \
    -c "DROP DATABASE IF EXISTS pgidem_bench" -c "CREATE DATABASE pgidem_bench"
"$bin/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo pg18) dbname=pgidem_bench" -c "CREATE EXTENSION pg_idempotency"
cargo run --release -q -p pg_idempotency_bench -- --dsn "$(conninfo pg18) dbname=pgidem_bench" "${smoke[@]}" --out "$out"
log "wrote $out"
