#!/usr/bin/env bash
# Two checkouts, or two users, on one machine: a private cluster whose port another program
# holds. Another listener (python3, bound to a port of 127.0.0.1; as root, run as the OS user
# nobody, so the message must name a user other than ours) holds a port, and:
#   - PG18_PORT set to it: scripts/cluster.sh pg18 start stops before initdb, in under a
#     second or two, naming the port, the holder's pid and OS user, and PG18_PORT;
#   - the default port held: the cluster takes one 100 up, remembers it, and everything that
#     asks port_of / conninfo reaches the server there; a restart keeps it;
#   - PG18_PORT set to a free port moves the cluster there, and is remembered;
#   - a different PG18_PORT while the cluster runs is refused.
# The cluster is one of its own (PGIDEM_CLUSTERS), with the staged extension copied from
# the private PostgreSQL 18 cluster's folder; the default port is moved (PG18_DEFAULT_PORT)
# so that the test never takes 54818 from anyone.
#
#   scripts/test-cluster-port.sh
# Each check goes to the test command's results file when PGIDEM_RESULTS names one.
set -euo pipefail
source "$(dirname "$0")/env.sh"

layer="private clusters' ports"
record() { if [ -n "${PGIDEM_RESULTS:-}" ]; then python3 "$ROOT/scripts/results.py" "$@"; fi; }

staged="$(cluster_dir pg18)/ext"
if ! pg18_pg_config >/dev/null || [ ! -f "$staged/lib/pg_idempotency.so" ]; then
    reason="the extension is not staged for PostgreSQL 18 (scripts/install-extension.sh pg18)"
    record add skip-missing "$layer" "every check" "$reason"; log "skipped: $reason"; exit 0
fi

unset PG18_PORT
work="$TARGET/port-test"
export PGIDEM_CLUSTERS="$work/clusters"
cluster=("$ROOT/scripts/cluster.sh" pg18)
psql="$(bindir_of pg18)/psql"

cleanup() {
    "${cluster[@]}" stop >/dev/null 2>&1 || true
    # The holder ends when its stdin closes.
    if [ -n "${HOLDER_PID:-}" ]; then
        local pid=$HOLDER_PID
        [ -z "${HOLDER[1]:-}" ] || exec {HOLDER[1]}>&-
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
rm -rf "$work" && mkdir -p "$PGIDEM_CLUSTERS/pg18"
cp -r "$staged" "$PGIDEM_CLUSTERS/pg18/ext"

# The holder: binds a port the kernel chooses, says which and its pid, and holds it until
# its stdin closes.
holder_user=$(id -un)
as_holder=()
if is_root; then holder_user=nobody; as_holder=(runuser -u nobody --); fi
coproc HOLDER { exec "${as_holder[@]}" /usr/bin/env python3 -c '
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], os.getpid(), flush=True)
sys.stdin.read()
'; }
read -r held holder_pid <&"${HOLDER[0]}" || die "the holder did not start"
log "port $held held by pid $holder_pid ($holder_user)"

# check <name> <command...>: one test; it runs in a subshell with -e (called from `if`,
# bash would ignore -e in a function), its output goes to the log.
failed=0
check() {
    local name="$1" rc; shift
    log "$layer: $name"
    set +e
    (set -e; "$@") > "$work/check.out" 2>&1
    rc=$?
    set -e
    cat "$work/check.out"
    if [ $rc -eq 0 ]; then record add pass "$layer" "$name"
    else record add fail "$layer" "$name" "$(tail -n 8 "$work/check.out" | tr '\n' '|')"; failed=1; fi
}
expect() { [ "$2" = "$3" ] || { echo "$1: wanted '$2', got '$3'"; return 1; }; }
contains() { case "$2" in *"$3"*) ;; *) echo "$1 does not say '$3': $2"; return 1 ;; esac; }
server_port() { "$psql" -X -At "$(conninfo pg18) dbname=postgres" -c "SHOW port"; }

override_taken() {
    local out rc=0 start=$SECONDS
    out=$(PG18_PORT=$held "${cluster[@]}" start 2>&1) || rc=$?
    [ $rc -ne 0 ] || { echo "the start succeeded on a taken port: $out"; return 1; }
    # Whole seconds: under 3 means it did not wait for a server to fail.
    [ $((SECONDS - start)) -lt 3 ] || { echo "it took $((SECONDS - start)) s to refuse"; return 1; }
    [ ! -f "$PGIDEM_CLUSTERS/pg18/data/PG_VERSION" ] || { echo "initdb ran before the port was checked"; return 1; }
    contains "the refusal" "$out" "port $held"
    contains "the refusal" "$out" "pid $holder_pid"
    contains "the refusal" "$out" "OS user $holder_user"
    contains "the refusal" "$out" "PG18_PORT"
    echo "refused: $out"
}

default_taken() {
    local out port
    out=$(PG18_DEFAULT_PORT=$held "${cluster[@]}" start 2>&1) || { echo "$out"; echo "the start failed"; return 1; }
    echo "$out"
    port=$(cat "$PGIDEM_CLUSTERS/pg18/port")
    [ "$port" -gt "$held" ] && [ $(((port - held) % 100)) = 0 ] ||
        { echo "the cluster took port $port, not one 100·n above $held"; return 1; }
    contains "the start's message" "$out" "port $held is in use by pid $holder_pid"
    expect "port_of" "$port" "$(PG18_DEFAULT_PORT=$held port_of pg18)"
    contains "conninfo" "$(conninfo pg18)" "port=$port"
    expect "the server's port, reached through conninfo" "$port" "$(server_port)"
    "${cluster[@]}" status
    python3 "$ROOT/scripts/port.py" free "$held" && { echo "the holder lost port $held"; return 1; }
    echo "the default port $held was taken: the cluster runs on $port"
}

restart_keeps() {
    local before; before=$(cat "$PGIDEM_CLUSTERS/pg18/port")
    PG18_DEFAULT_PORT=$held "${cluster[@]}" restart
    expect "the port after a restart" "$before" "$(server_port)"
}

override_free() {
    local free
    # A port the kernel just handed out and took back: free unless another program takes
    # it in the next instant.
    free=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "${cluster[@]}" stop
    PG18_PORT=$free "${cluster[@]}" start
    expect "the server's port under PG18_PORT=$free" "$free" "$(PG18_PORT=$free server_port)"
    expect "the port remembered, PG18_PORT unset" "$free" "$(port_of pg18)"
    expect "the server's port, PG18_PORT unset" "$free" "$(server_port)"
}

override_while_running() {
    local out rc=0 running; running=$(port_of pg18)
    out=$(PG18_PORT=$held "${cluster[@]}" start 2>&1) || rc=$?
    [ $rc -ne 0 ] || { echo "a start with another PG18_PORT succeeded while running on $running: $out"; return 1; }
    contains "the refusal" "$out" "running on port $running"
    expect "the server's port" "$running" "$(server_port)"
}

check "a PG18_PORT another program holds is refused at once, naming the port, its holder and the variable" override_taken
check "a default port another program holds is given up for one 100 up, which conninfo and port_of use" default_taken
check "a restart keeps the port the cluster took" restart_keeps
check "PG18_PORT set to a free port moves the cluster there, and it is remembered" override_free
check "another PG18_PORT while the cluster runs is refused" override_while_running
exit $failed
