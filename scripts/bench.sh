#!/usr/bin/env bash
# The README's benchmark command: sets up what is missing, installs the extension into the
# private PostgreSQL 18 cluster (and the portable SQL variant into a second database), runs
# every benchmark workload beside its baseline, and writes docs/benchmarks.md.
#
#   scripts/bench.sh            the full run (a few minutes)
#   scripts/bench.sh --smoke    tiny counts, to check that the harness works
#   scripts/bench.sh [--smoke] --only calls --only growth ...   some workloads (the report
#                               then holds only those)
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

smoke=()
out="$ROOT/docs/benchmarks.md"
if [ "${1:-}" = --smoke ]; then smoke=(--smoke); out="$TARGET/benchmarks-smoke.md"; shift; fi

"$ROOT/scripts/setup.sh" pg18
"$ROOT/scripts/install-extension.sh" pg18
"$ROOT/scripts/cluster.sh" pg18 start
fresh_database pg18 pgidem_bench extension
fresh_database pg18 pgidem_bench_portable portable
# The mcp workload's parts: the Python SDK for the counting server (skipped without it),
# and the proxy binary, found beside the benchmark's: both built in one cargo invocation
# (apart, each would build the shared crates with other features, and the benchmark twice).
"$ROOT/scripts/mcp-parts.sh"
cargo build --release -q -p pg_idempotency_mcp -p pg_idempotency_bench
"${CARGO_TARGET_DIR:-$TARGET}/release/pg_idempotency_bench" --dsn "$(conninfo pg18) dbname=pgidem_bench" \
    --portable-dsn "$(conninfo pg18) dbname=pgidem_bench_portable" "${smoke[@]}" --out "$out" "$@"
log "wrote $out"
