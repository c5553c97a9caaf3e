#!/usr/bin/env bash
# A private PostgreSQL cluster under target/clusters/<version>: its own data, socket folder
# and port, trust on loopback and socket, pg_idempotency preloaded. It never touches any
# other cluster. Its port (scripts/env.sh, port_of) is checked before the server starts: a
# default port another program holds is given up for the next free one, 100 up, which the
# cluster keeps (remembered in <cluster>/port); a port set with PG18_PORT / PG15_PORT that
# another program holds stops the start at once, naming the port and its holder.
#
#   scripts/cluster.sh <pg18|pg15> init|start|stop|restart|status|psql [psql args]|conninfo
set -euo pipefail
source "$(dirname "$0")/env.sh"

[ $# -ge 2 ] || die "usage: $0 <pg18|pg15> init|start|stop|restart|status|psql|conninfo"
version="$1"; cmd="$2"; shift 2
dir=$(cluster_dir "$version")
data="$dir/data"
sock=$(socket_dir "$version")
port=$(port_of "$version")
bin=$(bindir_of "$version") || die "$version is not set up: run scripts/setup.sh"

init() {
    [ -f "$data/PG_VERSION" ] && return 0
    log "initialising $version cluster in $data"
    mkdir -p "$dir" "$sock"
    if is_root; then chown postgres: "$dir" "$sock"; fi
    as_pg_user "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-locale >"$dir/initdb.log"
    {
        # No port here: start gives it (-p), so that it can move.
        echo "# pg_idempotency private cluster"
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$sock'"
        # pg_cron (Debian's postgresql-15-cron) where installed, for the scheduled purge.
        if [ -f "$("$(pg_config_of "$version")" --pkglibdir)/pg_cron.so" ]; then
            echo "shared_preload_libraries = 'pg_idempotency,pg_cron'"
            echo "cron.database_name = 'pgidem_cron'"
        else
            echo "shared_preload_libraries = 'pg_idempotency'"
        fi
        # The purge worker's database; the behaviour suite's worker tests use it.
        echo "pg_idempotency.database = 'pgidem_worker'"
        echo "max_connections = 200"
        echo "log_min_messages = warning"
        # Autovacuum must visit well within a ttl for the table to stay small under churn
        # (docs/benchmarks.md): the default of 1 minute is too slow for short ttls.
        echo "autovacuum_naptime = 2s"
        if [ "$version" = pg18 ]; then
            # The extension is staged inside the project, not in the server's install.
            echo "extension_control_path = '$dir/ext:\$system'"
            echo "dynamic_library_path = '$dir/ext/lib:\$libdir'"
        fi
    } | as_pg_user tee -a "$data/postgresql.conf" >/dev/null
}

running() { as_pg_user "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

port_free() { python3 "$ROOT/scripts/port.py" free "$1"; }
holder() { python3 "$ROOT/scripts/port.py" holder "$1"; }

# Sets $port to the port this start listens on, before anything slow runs.
choose_port() {
    local var override p i
    var=$(port_variable "$version")
    override="${!var:-}"
    port_free "$port" && return 0
    if [ -n "$override" ]; then
        die "$version cluster: port $port ($var=$override) is in use by $(holder "$port"); set $var to a free port, or unset it to let scripts/cluster.sh choose one"
    fi
    p=$(default_port "$version")
    for i in $(seq 40); do
        if [ "$p" != "$port" ] && port_free "$p"; then
            log "port $port is in use by $(holder "$port"): the $version cluster takes port $p (kept in $dir/port; $var overrides)"
            port=$p
            return 0
        fi
        p=$((p + 100))
    done
    die "$version cluster: no free port among $(default_port "$version") + 100·n up to $p; set $var to a free port"
}

start() {
    if [ -f "$data/PG_VERSION" ] && running; then
        local was; was=$(cat "$dir/port" 2>/dev/null || true)
        [ -z "$was" ] || [ "$was" = "$port" ] ||
            die "$version cluster is running on port $was, not $port ($(port_variable "$version")): restart it to move it (scripts/cluster.sh $version restart)"
        return 0
    fi
    choose_port
    init
    log "starting $version cluster on port $port"
    mkdir -p "$dir" && echo "$port" > "$dir/port"
    # The port is given at each start (PG18_PORT / PG15_PORT, or the one chosen above).
    if ! as_pg_user "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -o "-p $port" -w -t 60 start >/dev/null; then
        tail -n 20 "$dir/server.log" >&2
        # Another server may have taken the port since choose_port looked.
        port_free "$port" || die "$version cluster did not start: port $port was taken as it started, by $(holder "$port"); run the command again"
        die "$version cluster did not start"
    fi
    # The purge worker connects to pgidem_worker (see init); without it, it would exit
    # and retry every 10 s.
    local psql=("$bin/psql" -X -q -At "$(conninfo "$version") dbname=postgres")
    if [ "$("${psql[@]}" -c "SELECT count(*) FROM pg_database WHERE datname = 'pgidem_worker'")" = 0 ]; then
        "${psql[@]}" -c "CREATE DATABASE pgidem_worker"
    fi
}

stop() {
    [ -f "$data/PG_VERSION" ] || return 0
    running || return 0
    log "stopping $version cluster"
    as_pg_user "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null
}

case "$cmd" in
    init) init ;;
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status) if running; then echo "$version: running on port $port, socket $sock"; else echo "$version: stopped"; exit 3; fi ;;
    psql) exec "$bin/psql" "$(conninfo "$version") dbname=${PGDATABASE:-postgres}" "$@" ;;
    conninfo) conninfo "$version" ;;
    *) die "unknown command '$cmd'" ;;
esac
