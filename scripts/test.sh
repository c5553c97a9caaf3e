#!/usr/bin/env bash
# The README's test command: sets up what is missing, then runs every test layer on
# PostgreSQL 18 (embedded) and PostgreSQL 15 (Debian; needs root to install):
#   1. #[pg_test]       Rust internals inside the server  (cargo pgrx test)
#   2. golden SQL        the SQL surface                   (pg_regress)
#   3. isolation specs   sessions racing on one key        (pg_isolation_regress)
#   4. behaviour suite   tests/ and the client's store suite against the private cluster
# Layers 2 to 4 run twice per version: against the extension and against the portable SQL
# variant (sql/), installed into a database where the extension is absent.
# and, once, the canon crate's own tests and a smoke run of the benchmark harness.
#
#   scripts/test.sh [pg18|pg15 ...]
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

if [ $# -gt 0 ]; then
    versions=("$@")
else
    versions=(pg18)
    if is_root || pg15_available; then versions+=(pg15); fi
fi
"$ROOT/scripts/setup.sh" "$([ " ${versions[*]} " = " pg18 " ] && echo pg18 || echo all)"
if [[ " ${versions[*]} " == *" pg15 "* ]] && ! pg15_available; then
    log "PostgreSQL 15 is not installed and installing it needs root: running PostgreSQL 18 only"
    versions=(pg18)
fi

failures=()
timings=()
step() {
    local name="$1"; shift
    local start=$SECONDS
    log "$name"
    if "$@"; then timings+=("ok    $name ($((SECONDS - start)) s)")
    else failures+=("$name"); timings+=("FAIL  $name ($((SECONDS - start)) s)"); fi
}

pg_tests() {
    local version="$1" args=()
    if is_root; then
        local pgdata="$TARGET/pgrx-test-data"
        mkdir -p "$pgdata" && chown postgres: "$pgdata"
        args=(--runas postgres --pgdata "$pgdata/$version")
    fi
    # cargo pgrx test copies its debug build over the installed library: nothing may have
    # that file mapped, and the release build is installed again afterwards.
    "$ROOT/scripts/cluster.sh" "$version" stop
    if [ "$version" = pg15 ]; then rm -f "$("$(pg_config_of pg15)" --pkglibdir)/pg_idempotency.so"; fi
    (cd "$ROOT/pg_idempotency" && cargo pgrx test "$version" "${args[@]}")
}

serve() {
    local version="$1"
    "$ROOT/scripts/install-extension.sh" "$version" && "$ROOT/scripts/cluster.sh" "$version" start
}

behaviour_suite() {
    local version="$1" backend="$2" bindir
    bindir=$(bindir_of "$version")
    fresh_database "$version" pgidem_it "$backend" &&
    # RedisStore runs the client's suites too where Debian's redis-server is installed.
    local features=()
    if command -v redis-server >/dev/null && "$ROOT/scripts/redis.sh" start; then
        features=(--features redis)
    else
        log "redis-server is not installed (it needs root): RedisStore is not tested"
    fi
    PGIDEM_DSN="$(conninfo "$version") dbname=pgidem_it" PGIDEM_BINDIR="$bindir" \
        PGIDEM_BACKEND="$backend" REDIS_URL="$("$ROOT/scripts/redis.sh" url)" \
        cargo test -p pg_idempotency_tests -p pg_idempotency_client "${features[@]}" -- --test-threads 4
}

bench_smoke() {
    fresh_database pg18 pgidem_bench extension &&
    fresh_database pg18 pgidem_bench_portable portable &&
    cargo run -q -p pg_idempotency_bench -- --dsn "$(conninfo pg18) dbname=pgidem_bench" \
        --portable-dsn "$(conninfo pg18) dbname=pgidem_bench_portable" \
        --smoke --out "$TARGET/benchmarks-smoke.md"
}

step "canonical JSON (canon crate: vectors, numbers, properties)" cargo test -p pg_idempotency_canon

for v in "${versions[@]}"; do
    step "$v: #[pg_test] (Rust inside the server)" pg_tests "$v"
    step "$v: build, install and start the private cluster" serve "$v"
    for b in "${BACKENDS[@]}"; do
        step "$v ($b): golden SQL and isolation specs" "$ROOT/scripts/test-sql.sh" "$v" "$b"
        step "$v ($b): behaviour suite (tests/)" behaviour_suite "$v" "$b"
    done
    if [ "$v" = pg18 ]; then step "benchmark harness smoke run" bench_smoke; fi
done

echo
printf '%s\n' "${timings[@]}"
if [ ${#failures[@]} -gt 0 ]; then
    echo "FAILED: ${failures[*]}" >&2
    exit 1
fi
echo "all tests passed on: ${versions[*]}"
