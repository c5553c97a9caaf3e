#!/usr/bin/env bash
# The README's benchmark command: sets up what is missing, installs the extension into the
# private PostgreSQL 18 cluster (and the portable SQL variant into a second database), makes
# PL/Proxy proxies on the private PostgreSQL 15 cluster where PL/Proxy is installed, runs
# every benchmark workload beside its baseline, and writes docs/benchmarks.md.
#
#   scripts/bench.sh            the full run (a few minutes)
#   scripts/bench.sh --smoke    tiny counts, to check that the harness works
#   scripts/bench.sh [--smoke] --only calls --only growth ...   some workloads (the report
#                               then holds only those)
#   scripts/bench.sh --only batch    N calls as one batch beside N single calls, at 0 and 1 ms
#                               added round trip, both backends
#   scripts/bench.sh --only mcp_flood   another principal's tools/call latency through the MCP
#                               proxy (p50, p99) with and without a flood of waiting duplicates
#                               from one principal, alternating in one run
#   scripts/bench.sh --only sharding [--only sharding_fsync]   claim + complete through a
#                               PL/Proxy proxy of 1, 2 and 4 partitions beside one partition
#                               directly (PostgreSQL 15; the second with fsync off)
#   scripts/bench.sh --only peers   pg_idempotency beside AWS Powertools (Python, Redis),
#                               idemkit (Python, PostgreSQL), @node-idempotency (Redis),
#                               express-idempotency and the naive pattern, at added round trips
#                               of 0, 0.2 and 1 ms (scripts/peers.sh installs the peers and the
#                               Python package from python/; two Redis servers, one with
#                               appendfsync always); `--peers-row ID` (repeated) runs only those
#                               rows (ids in bench/src/workloads/peers/systems.rs): give `--out`
#                               too, the report then holds those rows only
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

# The sharding workload: PL/Proxy proxies of 1, 2 and 4 partitions of each backend, made
# afresh on the private PostgreSQL 15 cluster (PL/Proxy is packaged for 15 only). The
# extension must already be installed there (scripts/install-extension.sh pg15, as root):
# that writes Debian's folders, which every checkout on the machine shares, so the
# benchmark uses what is installed and never installs it. Without them the bench reports
# the workload skipped.
sharding_wanted() {
    local a prev=""
    [[ " $* " == *" --only "* ]] || return 0
    for a in "$@"; do
        [ "$prev" = --only ] && [[ "$a" == sharding || "$a" == sharding_fsync ]] && return 0
        prev="$a"
    done
    return 1
}
proxies=()
if sharding_wanted "$@"; then
    if ! pg15_available; then
        log "sharding: skipped: PostgreSQL 15 is not installed (Debian's postgresql-15)"
    elif [ ! -f "$("$PG15_PG_CONFIG" --sharedir)/extension/plproxy.control" ]; then
        log "sharding: skipped: PL/Proxy is not installed (Debian's postgresql-15-plproxy)"
    elif [ ! -f "$("$PG15_PG_CONFIG" --sharedir)/extension/pg_idempotency.control" ]; then
        log "sharding: skipped: pg_idempotency is not installed for PostgreSQL 15 (scripts/install-extension.sh pg15, as root)"
    else
        "$ROOT/scripts/cluster.sh" pg15 start
        for b in extension portable; do
            for n in 1 2 4; do
                db="pgidem_bench_proxy_${b}_$n"
                # Quiet: DROP DATABASE IF EXISTS says NOTICE for every new name.
                PGOPTIONS="-c client_min_messages=warning" "$ROOT/scripts/sharded.sh" pg15 "$b" "$db" "$n" >/dev/null
                proxies+=(--proxy-dsn "$(conninfo pg15) dbname=$db")
            done
        done
    fi
fi

# The peers workload (in every run but an --only run that names other workloads): the peers
# from their registries, pinned (scripts/peers.sh; skipped rows say why when node or python
# is missing), and two private Redis servers, one without persistence and one with
# `appendfsync always`. Without redis-server the Redis rows are reported skipped.
wanted() {
    local a prev=""
    [[ " $* " == *" --only "* ]] || return 0
    for a in "${@:2}"; do
        [ "$prev" = --only ] && [ "$a" = "$1" ] && return 0
        prev="$a"
    done
    return 1
}
peers=()
if wanted peers "$@"; then
    "$ROOT/scripts/peers.sh"
    eval "$("$ROOT/scripts/peers.sh" paths)"
    peers+=(--peers-python "$PEERS_PYTHON" --peers-node "$PEERS_NODE")
    if command -v redis-server >/dev/null; then
        "$ROOT/scripts/redis.sh" start
        "$ROOT/scripts/redis-durable.sh" start
        redis_url="$("$ROOT/scripts/redis.sh" url)"
        redis_port="${redis_url##*:}"; redis_port="${redis_port%/}"
        peers+=(--redis-port "$redis_port" --redis-durable-port "$("$ROOT/scripts/redis-durable.sh" port)")
    else
        log "peers: redis-server is not installed (scripts/setup.sh installs it as root): the Redis rows are reported skipped"
    fi
fi

cargo build --release -q -p pg_idempotency_mcp -p pg_idempotency_bench
"${CARGO_TARGET_DIR:-$TARGET}/release/pg_idempotency_bench" --dsn "$(conninfo pg18) dbname=pgidem_bench" \
    --portable-dsn "$(conninfo pg18) dbname=pgidem_bench_portable" "${proxies[@]}" "${peers[@]}" "${smoke[@]}" --out "$out" "$@"
# A later --out among the arguments wins (the bench takes the last one).
prev=""; for a in "$@"; do [ "$prev" = --out ] && out="$a"; prev="$a"; done
log "wrote $out"
