#!/usr/bin/env bash
# The README's test command: sets up what is missing, then runs every test layer on
# PostgreSQL 18 (embedded) and PostgreSQL 15 (Debian; needs root to install):
#   1. #[pg_test]       Rust internals inside the server  (cargo pgrx test)
#   2. golden SQL        the SQL surface                   (pg_regress)
#   3. isolation specs   sessions racing on one key        (pg_isolation_regress)
#   4. behaviour suite   tests/, the client's suites, the HTTP layer's (server/) and the
#                        MCP proxy's (mcp/) against the private cluster, and the fault
#                        suite's short runs (tests/faults/)
# Layers 2 to 4 run twice per version: against the extension and against the portable SQL
# variant (sql/), installed into a database where the extension is absent. The fronts'
# suites (the HTTP layer's, the MCP proxy's) run once per backend and version: on 18
# directly on the extension and through PgBouncer on the portable variant, on 15 through the
# PL/Proxy proxy; the client's MemoryStore and RedisStore scenarios, which do not touch
# PostgreSQL, on the first extension pass.
# The two versions run side by side, each in a lane of its own (PostgreSQL 15's in the
# background, its output in target/test-results/lane-pg15.log).
# On PostgreSQL 18 the demo's build (plain cargo, no cargo-pgrx) is compared with cargo pgrx
# package's, byte for byte, and the private clusters' choice of port is tested.
# On PostgreSQL 15 the Debian package (scripts/package.sh) is built, installed with dpkg,
# smoke-tested on a cluster of its own and purged (scripts/test-package.sh).
# The Python package (python/) is linted, type-checked, built and installed into fresh
# environments, and its tests run on both backends and versions (scripts/test-python.sh);
# the TypeScript package (typescript/) alike: ESLint, tsc --strict, npm pack and the tarball
# installed into a fresh project, then its tests on both backends and versions
# (scripts/test-typescript.sh).
# The Python and Node.js examples (examples/) run against both backends too; real migration
# tools apply the portable variant's plain-SQL migrations (PostgreSQL 18); the canon,
# protocol, client-macros and xtask crates' own tests and a smoke run of the benchmark harness
# run once. On PostgreSQL 18 the client's suites run again through Debian's PgBouncer in
# transaction mode (scripts/pgbouncer.sh), and the examples through it on both versions.
# The command ends with one line: N passed, N failed, N skipped (scripts/results.py; under
# CI=true a skip for something setup installs counts as failed).
#
#   scripts/test.sh [pg18|pg15 ...]
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

# A clean clone gains nothing from incremental compilation, whose state roughly doubles
# the target folder (a CI run once ran out of disk).
if [ "${CI:-}" = "true" ]; then export CARGO_INCREMENTAL=0; fi

if [ $# -gt 0 ]; then
    versions=("$@")
else
    # PostgreSQL 15 always: without root it cannot be installed, and is reported skipped.
    versions=(pg18 pg15)
fi
# cargo-pgrx always: `cargo pgrx test`, and the comparison of the demo's build with
# `cargo pgrx package`'s.
if [ " ${versions[*]} " = " pg18 " ]; then "$ROOT/scripts/setup.sh" pg18 cargo-pgrx; else "$ROOT/scripts/setup.sh" all; fi
skipped_versions=()
if [[ " ${versions[*]} " == *" pg15 "* ]] && ! pg15_usable; then
    log "$(pg15_missing_reason): running PostgreSQL 18 only"
    versions=(pg18)
    skipped_versions=(pg15)
fi

# Every test's verdict goes to one results file (scripts/results.py), so the command ends
# with one honest line: how many passed, failed and were skipped, and why each skip. The two
# PostgreSQL versions run side by side (their lanes, below), each lane writing a results
# file of its own; the summary reads them joined.
export PGIDEM_RESULTS="$TARGET/test-results/results.tsv"
# A run's own id: the Python package is installed into fresh environments once per run
# (scripts/test-python.sh), as a user's pip install would.
export PGIDEM_RUN_ID="$(date +%s%N)"
rm -rf "$TARGET/test-results" && mkdir -p "$TARGET/test-results" && : > "$PGIDEM_RESULTS"
results() { python3 "$ROOT/scripts/results.py" "$@"; }
failed_count() { grep -c '^fail' "$PGIDEM_RESULTS" 2>/dev/null || true; }

timings=()
steps=0
lane=main
# step <how its tests are counted> <name> <command...>
#   libtest  cargo test output: each test line, with the skips the tests recorded
#   self     the command records its own tests (test-sql.sh, test-examples.sh)
#   one      the step is one test
#   setup    not a test: recorded only when it fails
step() {
    local how="$1" name="$2"; shift 2
    local start=$SECONDS n=$((++steps)) before rc=0
    local log="$TARGET/test-results/$lane-$n.log"
    before=$(failed_count)
    log "$name"
    export PGIDEM_SKIPS="$TARGET/test-results/$lane-$n.skips"
    set +e
    "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    case "$how" in
        libtest) results libtest "$log" "$name" "$PGIDEM_SKIPS" ;;
        one) [ $rc -eq 0 ] && results add pass "$name" "$name" ;;
    esac
    if [ $rc -ne 0 ] && [ "$(failed_count)" = "$before" ]; then
        # The log's last lines go in the summary: a CI run's summary may be all that is read.
        results add fail "$name" "(the step itself)" \
            "exit status $rc; log: $log; its last lines: $(tail -n 15 "$log" | tr '\n' '|')"
    fi
    timings+=("$([ $rc -eq 0 ] && echo 'ok  ' || echo 'FAIL')  $name ($((SECONDS - start)) s)")
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
    local version="$1" backend="$2" bindir redis=()
    bindir=$(bindir_of "$version")
    fresh_database "$version" pgidem_it "$backend" || return 1
    # RedisStore runs the client's suites too where Debian's redis-server is installed;
    # without it, those tests are skipped (REDIS_URL unset).
    if command -v redis-server >/dev/null && "$ROOT/scripts/redis.sh" start; then
        # A database of its own per lane (the versions run side by side).
        local url; url="$("$ROOT/scripts/redis.sh" url)"
        redis=(REDIS_URL="${url%/}/$redis_db")
    fi
    # The Node.js provider the web executor is tested against (client/tests/web/upstream_scenarios.rs).
    "$ROOT/scripts/upstream-node.sh" || return 1
    # The MCP proxy's real parts: the official SDKs' clients and the reference servers.
    "$ROOT/scripts/mcp-parts.sh" || return 1
    # The fronts' suites (the HTTP layer's `http`, the MCP proxy's `proxy`) reach the
    # database only through the client's PgStore, whose scenarios run here on every pass.
    # They run once per backend and version, each time through another path: on 18 here on
    # the extension, through PgBouncer on the portable variant (through_pooler); on 15
    # through the PL/Proxy proxy, on the extension (through_proxy). The other passes name the
    # other targets, with the same packages and features, so that nothing is compiled again
    # (doc tests, which need no database, run on 18's extension pass). About 70 s a pass.
    local targets=()
    if [ "$version" = pg15 ] || [ "$backend" = portable ]; then
        read -r -a targets <<< "$(behaviour_targets_but http proxy)" || return 1
    fi
    # The client's scenarios on MemoryStore and RedisStore (tests named ...::memory and
    # ...::redis) do not touch PostgreSQL: they run on one pass only, the first version's
    # extension pass (stores_pass, below).
    local only_postgres=()
    if [ "$version $backend" != "$stores_pass" ]; then
        only_postgres=(--skip ::memory --skip ::redis)
    fi
    env "${redis[@]}" PGIDEM_DSN="$(conninfo "$version") dbname=pgidem_it" PGIDEM_BINDIR="$bindir" \
        PGIDEM_BACKEND="$backend" \
        cargo test --no-fail-fast "${BEHAVIOUR_PACKAGES[@]}" --features pg_idempotency_client/redis \
        "${targets[@]}" -- --test-threads 4 "${only_postgres[@]}"
}

# The behaviour suite's packages: one list, so that every run builds them with one feature set.
BEHAVIOUR_PACKAGES=(-p pg_idempotency_tests -p pg_idempotency_client -p pg_idempotency_server
    -p pg_idempotency_faults -p pg_idempotency_mcp)

# `--lib --bins --test X ...` for every test target of the behaviour suite's packages but
# the ones named and those `cargo test` leaves out (`test = false`: the migration tools'
# suite, a step of its own): a target added later is run without being listed anywhere.
behaviour_targets_but() {
    cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
leave_out = set(sys.argv[1:])
packages = {"pg_idempotency_tests", "pg_idempotency_client", "pg_idempotency_server",
            "pg_idempotency_faults", "pg_idempotency_mcp"}
names = sorted(t["name"] for p in json.load(sys.stdin)["packages"] if p["name"] in packages
               for t in p["targets"] if t["kind"] == ["test"] and t.get("test", True)
               and t["name"] not in leave_out)
print(" ".join(["--lib", "--bins"] + [a for n in names for a in ("--test", n)]))
' "$@"
}

# The client's behaviour suite over PgStore (client/tests/parity.rs), the HTTP layer's and the
# MCP proxy's suites, unchanged, through a PL/Proxy proxy in front of four partitions of the
# backend (scripts/sharded.sh). tests/tests/sharding.rs, in the behaviour suite, tests the
# proxy layer itself. PL/Proxy is Debian's package for PostgreSQL 15.
through_proxy() {
    local version="$1" backend="$2"
    if [ ! -f "$("$(pg_config_of "$version")" --sharedir)/extension/plproxy.control" ]; then
        results add skip-missing "$version ($backend): through a PL/Proxy proxy" "every suite" \
            "PL/Proxy is not installed (Debian's postgresql-15-plproxy: scripts/setup.sh installs it as root)"
        return 0
    fi
    "$ROOT/scripts/sharded.sh" "$version" "$backend" pgidem_proxy 4 || return 1
    local rc=0 run=(env PGIDEM_DSN="$(conninfo "$version") dbname=pgidem_proxy" PGIDEM_BINDIR="$(bindir_of "$version")"
        PGIDEM_BACKEND="$backend" PGIDEM_THROUGH_PROXY=1 cargo test --no-fail-fast --features pg_idempotency_client/redis)
    # PgStore's scenarios only: the parity suite's other stores do not use the database.
    "${run[@]}" -p pg_idempotency_client --test parity -- postgres || rc=1
    # The fronts' suites once, on the extension: what a pooler changes is the protocol
    # their store speaks, which the client's scenarios above already cover on both
    # backends (the fronts' two suites take about 3 minutes each here).
    if [ "$backend" = extension ]; then
        # The client named for its feature only (the behaviour suite's build, reused).
        "${run[@]}" -p pg_idempotency_client -p pg_idempotency_server -p pg_idempotency_mcp \
            --test http --test proxy -- --test-threads 4 || rc=1
    fi
    return $rc
}

# The client's parity suite (PgStore's scenarios), the dispatcher's, the holder's and the
# exactly-once tests, the HTTP layer's and the MCP proxy's suites, through Debian's PgBouncer
# in transaction mode (scripts/pgbouncer.sh), with unnamed statements
# (PGIDEM_STATEMENTS=unnamed: PgStore::statement_mode); the Python and Node.js examples
# through it too (scripts/test-examples.sh, PGIDEM_EXAMPLES_DSN).
through_pooler() {
    local version="$1" backend="$2"
    if ! command -v pgbouncer >/dev/null; then
        results add skip-missing "$version ($backend): through PgBouncer in transaction mode" "every suite" \
            "pgbouncer is not installed (Debian's pgbouncer: scripts/setup.sh installs it as root)"
        return 0
    fi
    fresh_database "$version" pgidem_pooled "$backend" && "$ROOT/scripts/pgbouncer.sh" start "$version" || return 1
    # Through the pooler a backend's next call may be long in coming (the counts of answers
    # that write nothing wait for it): the suites read exact counts, so the extension
    # writes each at once here (docs/scaling.md, "Through a connection pooler").
    if [ "$backend" = extension ]; then
        "$(bindir_of "$version")/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo "$version") dbname=postgres" \
            -c "ALTER DATABASE pgidem_pooled SET pg_idempotency.count_flush_interval_ms = 0" >/dev/null || return 1
    fi
    local rc=0 run=(env PGIDEM_DSN="$("$ROOT/scripts/pgbouncer.sh" conninfo "$version") dbname=pgidem_pooled"
        PGIDEM_BINDIR="$(bindir_of "$version")" PGIDEM_BACKEND="$backend" PGIDEM_STATEMENTS=unnamed
        PGIDEM_MCP_STATEMENTS=unnamed PGIDEM_THROUGH_POOLER=1 cargo test --no-fail-fast --features pg_idempotency_client/redis)
    # PgStore's scenarios only: the parity suite's other stores do not use the database.
    "${run[@]}" -p pg_idempotency_client --test parity -- postgres --test-threads 4 || rc=1
    "${run[@]}" -p pg_idempotency_client --test calls -- \
        calls::dispatcher::postgres calls::holder::postgres calls::exactly_once --test-threads 4 || rc=1
    # The fronts' suites once, on the portable variant (their pass on the extension is
    # direct, in the behaviour suite): what a pooler changes is the protocol their store
    # speaks, which the client's scenarios above cover on both backends.
    if [ "$backend" = portable ]; then
        # The client named for its feature only (the behaviour suite's build, reused).
        "${run[@]}" -p pg_idempotency_client -p pg_idempotency_server -p pg_idempotency_mcp \
            --test http --test proxy -- --test-threads 4 || rc=1
    fi
    return $rc
}

# Real migration tools (Alembic, dbmate, node-pg-migrate, pinned: scripts/migration-tools.sh)
# apply the portable variant's plain-SQL migrations, each test in a database of its own.
migration_tools() {
    local version="$1"
    "$ROOT/scripts/migration-tools.sh" || return 1
    PGIDEM_DSN="$(conninfo "$version") dbname=postgres" PGIDEM_BINDIR="$(bindir_of "$version")" \
        cargo test --no-fail-fast -p pg_idempotency_tests --test migration_tools
}

bench_smoke() {
    fresh_database pg18 pgidem_bench extension &&
    fresh_database pg18 pgidem_bench_portable portable &&
    "$ROOT/scripts/mcp-parts.sh" &&
    # The peers workload's parts: the pinned peers (a fraction of a second once installed,
    # about 20 s the first time) and, where redis-server is installed, the two Redis servers.
    # A part that is missing makes its rows report skipped, with the reason, in the report.
    "$ROOT/scripts/peers.sh" &&
    local peers=() && eval "$("$ROOT/scripts/peers.sh" paths)" &&
    peers+=(--peers-python "$PEERS_PYTHON" --peers-node "$PEERS_NODE") &&
    if command -v redis-server >/dev/null; then
        "$ROOT/scripts/redis.sh" start && "$ROOT/scripts/redis-durable.sh" start &&
        local url && url="$("$ROOT/scripts/redis.sh" url)" && url="${url##*:}" &&
        peers+=(--redis-port "${url%/}" --redis-durable-port "$("$ROOT/scripts/redis-durable.sh" port)")
    fi &&
    # The proxy and the bench in one build (one feature set for the crates they share); the
    # bench finds the proxy beside itself.
    cargo build -q -p pg_idempotency_mcp -p pg_idempotency_bench &&
    "${CARGO_TARGET_DIR:-$TARGET}/debug/pg_idempotency_bench" --dsn "$(conninfo pg18) dbname=pgidem_bench" \
        --portable-dsn "$(conninfo pg18) dbname=pgidem_bench_portable" "${peers[@]}" \
        --smoke --out "$TARGET/benchmarks-smoke.md"
}

# The crates that need no database: once, in the first lane to have room.
crates_alone() {
    step libtest "canonical JSON (canon crate: vectors, numbers, properties)" cargo test -p pg_idempotency_canon
    step libtest "protocol (declarations, codes and words) and xtask (rendering, the menu)" cargo test -p pg_idempotency_protocol -p xtask
    step libtest "typed tools' attribute (client-macros: what it builds, what the compiler refuses)" cargo test -p pg_idempotency_client_macros
    step self "Python package: ruff, mypy --strict, the wheel and the sdist into fresh environments" \
        "$ROOT/scripts/test-python.sh" checks
    step self "TypeScript package: ESLint, tsc --strict, the build, npm pack, the tarball installed and imported (ESM, CommonJS, types)" \
        "$ROOT/scripts/test-typescript.sh" checks
}

# locked <name> <command...>: the command (a function too) holding target/test-results/.<name>.lock.
# The command runs with the lock's descriptor closed (bash keeps its own copy, closed on
# exec): a server the command starts must not inherit the lock and hold it for its life.
locked() { local name="$1"; shift; ( flock 9; "$@" 9>&- ) 9> "$TARGET/test-results/.$name.lock"; }

# Every layer on one PostgreSQL version.
run_version() {
    local v="$1"
    # The extension's builds, one lane at a time per profile: cargo copies each build's
    # library to one path per profile (target/release/libpg_idempotency.so, target/debug/),
    # which the step reads right after its build (to stage it, package it, install it), so
    # the other version's build must not replace it in between. A separate target folder
    # for 15 would build every dependency of pgrx twice (measured: 15's #[pg_test] step took
    # 4.5 minutes instead of 50 s, and its lane finished 8 minutes after 18's).
    # The Debian package installs into the folders the pg15 layers install into, and dpkg
    # --purge empties them: it runs first, leaves them as it found them, and pg_tests and
    # serve install the extension there afresh anyway.
    if [ "$v" = pg15 ]; then
        step self "pg15: Debian package (build, dpkg -i, smoke test, dpkg --purge)" \
            locked extension-release locked dpkg "$ROOT/scripts/test-package.sh"
    fi
    step libtest "$v: #[pg_test] (Rust inside the server)" locked extension-debug pg_tests "$v"
    step setup "$v: build, install and start the private cluster" locked extension-release serve "$v"
    if [ "$v" = pg18 ]; then
        # The demo's plain cargo build against `cargo pgrx package` (the same build, shared).
        step self "pg18: the demo's build and cargo pgrx package's, file by file" \
            locked extension-release "$ROOT/scripts/test-staging.sh" pg18
        step self "private clusters' ports: a taken port is given up, or refused when set" "$ROOT/scripts/test-cluster-port.sh"
    fi
    for b in "${BACKENDS[@]}"; do
        step self "$v ($b): golden SQL and isolation specs" "$ROOT/scripts/test-sql.sh" "$v" "$b"
        step libtest "$v ($b): behaviour suite (tests/, client/, server/, mcp/, tests/faults/)" behaviour_suite "$v" "$b"
        step self "$v ($b): Python and Node.js examples" "$ROOT/scripts/test-examples.sh" "$v" "$b"
        # The sdist's tests and the other Pythons once, on the extension pass of the lane
        # that has room (15's, when it runs: 18's is the longer).
        local ends=()
        if [ "$b" = extension ] && [ "$v" = "$python_ends_version" ]; then ends=(--ends); fi
        step self "$v ($b): Python package (pytest, by the installed wheel${ends:+; its sdist; Python 3.10 and 3.13})" \
            "$ROOT/scripts/test-python.sh" "$v" "$b" "${ends[@]}"
        step self "$v ($b): TypeScript package (node --test)" "$ROOT/scripts/test-typescript.sh" "$v" "$b"
        if [ "$v" = pg15 ]; then
            step libtest "$v ($b): client, HTTP layer and MCP proxy through a PL/Proxy proxy (4 partitions)" through_proxy "$v" "$b"
        fi
        # On PostgreSQL 18 only: about 3 minutes per backend (the MCP proxy's suite is most
        # of it), too much to run again on 15; the examples take seconds, on both versions.
        if [ "$v" = pg18 ]; then
            step libtest "$v ($b): client, HTTP layer and MCP proxy through PgBouncer (transaction mode)" through_pooler "$v" "$b"
            # On the portable variant, as the fronts' suites: what a pooler changes is the
            # protocol the store speaks, the same for both backends.
            if [ "$b" = portable ]; then
                step self "$v ($b): Python package through PgBouncer (transaction mode)" \
                    env PGIDEM_PYTHON_THROUGH_POOLER=1 "$ROOT/scripts/test-python.sh" "$v" "$b"
            fi
        fi
        step self "$v ($b): Python and Node.js examples through PgBouncer (transaction mode)" \
            env PGIDEM_EXAMPLES_THROUGH_POOLER=1 "$ROOT/scripts/test-examples.sh" "$v" "$b"
    done
    if [ "$v" = pg18 ]; then
        step libtest "$v (portable): migration tools (Alembic, dbmate, node-pg-migrate)" migration_tools "$v"
        step one "benchmark harness smoke run" bench_smoke
        # The binary the smoke run built (debug, the behaviour suite's feature set): its
        # package is the release one's but for the binary's speed, and costs no build.
        step self "pg18: the MCP proxy's Debian package (build, lintian, dpkg -i, a call through it, dpkg --purge)" \
            locked dpkg "$ROOT/scripts/test-package-mcp.sh" --binary "${CARGO_TARGET_DIR:-$TARGET}/debug/pg-idempotency-mcp"
    fi
}

# What the lanes share is started or installed once, before them: the test Redis, the
# Node.js provider, the MCP parts (each install script also takes a lock of its own).
shared_parts() {
    if command -v redis-server >/dev/null; then "$ROOT/scripts/redis.sh" start; fi
    "$ROOT/scripts/upstream-node.sh" && "$ROOT/scripts/mcp-parts.sh"
}
step setup "the parts both versions' suites share (Redis, the Node.js provider, the MCP parts)" shared_parts

# The two versions run side by side, each in a lane of its own: PostgreSQL 15's in the
# background (with the crates' own tests first), PostgreSQL 18's here. Most of a behaviour
# suite waits on the database, on servers starting and on leases, so one lane fills the
# other's idle time: about 10 minutes less than one after the other (docs/testing.md). Each
# lane has its own clusters, databases, PgBouncer, Redis database, step logs
# (target/test-results/<lane>-N.log) and results file; dpkg, which takes one package at a
# time, is taken in turn (flock). The background lane's output goes to its log file and
# its timings are printed after this lane's.
stores_pass="${versions[0]} extension"
python_ends_version="${versions[-1]}"
second_lane=()
if [[ " ${versions[*]} " == *" pg15 "* ]]; then
    second_lane=(pg15)
fi
lane_pid=""
if [ ${#second_lane[@]} -gt 0 ]; then
    lane_log="$TARGET/test-results/lane-pg15.log"
    log "PostgreSQL 15's lane runs in the background: $lane_log"
    (
        lane=pg15 redis_db=1 steps=0 timings=()
        export PGIDEM_RESULTS="$TARGET/test-results/results-pg15.tsv"
        : > "$PGIDEM_RESULTS"
        crates_alone
        run_version pg15
        printf '%s\n' "${timings[@]}" > "$TARGET/test-results/timings-pg15.txt"
    ) > "$lane_log" 2>&1 &
    lane_pid=$!
fi
lane=pg18 redis_db=0 steps=0
if [[ " ${versions[*]} " == *" pg18 "* ]]; then
    [ -n "$lane_pid" ] || crates_alone
    run_version pg18
fi
if [ -n "$lane_pid" ]; then
    log "waiting for PostgreSQL 15's lane"
    if ! wait "$lane_pid"; then
        results add fail "pg15 lane" "(the lane itself)" "it stopped before its end; log: $lane_log"
    fi
    cat "$TARGET/test-results/results-pg15.tsv" >> "$PGIDEM_RESULTS"
fi
for v in "${skipped_versions[@]}"; do
    results add skip-missing "$v" "every layer" "$(pg15_missing_reason)"
done

echo
printf '%s\n' "${timings[@]}"
if [ -n "$lane_pid" ]; then
    echo "PostgreSQL 15's lane (side by side with the above; log: $lane_log):"
    cat "$TARGET/test-results/timings-pg15.txt" 2>/dev/null || echo "  (no timings: the lane did not finish)"
fi
results summary
