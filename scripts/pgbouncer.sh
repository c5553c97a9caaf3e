#!/usr/bin/env bash
# A private PgBouncer in transaction mode in front of a private cluster, the way most managed
# PostgreSQL is reached: Debian's pgbouncer (1.18, which keeps no prepared statement across
# transactions), on its own port, with its config, log and pid under target/pgbouncer/<version>.
# Clients log in as any role of the cluster without a password (the cluster trusts local
# connections): PgBouncer looks each role up through auth_query as postgres, so the roles
# the tests create on the fly log in too.
#
#   scripts/pgbouncer.sh start|stop|conninfo [pg18|pg15]
#
# PGBOUNCER_PORT overrides the port (56518 in front of pg18, 56515 in front of pg15).
set -euo pipefail
source "$(dirname "$0")/env.sh"

action="${1:-}"
version="${2:-pg18}"
case "$version" in
    pg18) default=56518 ;;
    pg15) default=56515 ;;
    *) die "unknown PostgreSQL version '$version' (pg18 or pg15)" ;;
esac
port="${PGBOUNCER_PORT:-$default}"
dir="$TARGET/pgbouncer/$version"

running() { [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; }

# pgbouncer.ini: every database of the cluster (the fallback entry `*`), over its Unix socket.
# Written to pgbouncer.ini.new: start compares it with the running server's.
write_config() {
    mkdir -p "$dir"
    # Any password: the cluster trusts the socket. postgres is the role auth_query runs as.
    printf '"postgres" ""\n' > "$dir/users.txt"
    cat > "$dir/pgbouncer.ini.new" <<EOF
[databases]
* = host=$(socket_dir "$version") port=$(port_of "$version")

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $dir/users.txt
auth_user = postgres
; Enough server connections for the suites' parallel tests: a begin that waits (its wait
; argument) holds a server connection for the whole wait, and the HTTP layer's test of 50
; waiting duplicates runs beside a heartbeat that must get one to keep its lease.
default_pool_size = 80
max_client_conn = 800
; tokio-postgres, psycopg and node-pg send nothing else a pooler must refuse; JDBC-style
; drivers send these two.
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
}

case "$action" in
    start)
        command -v pgbouncer >/dev/null || die "pgbouncer is not installed (scripts/setup.sh installs Debian's as root)"
        write_config
        if running; then
            # Still in front of the cluster as it runs now (its port may have moved): keep it.
            if cmp -s "$dir/pgbouncer.ini.new" "$dir/pgbouncer.ini"; then exit 0; fi
            pid="$(cat "$dir/pgbouncer.pid")"
            kill "$pid"
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        mv "$dir/pgbouncer.ini.new" "$dir/pgbouncer.ini"
        # PgBouncer refuses to run as root: it runs as the cluster's OS user.
        if is_root; then chown -R postgres: "$TARGET/pgbouncer"; fi
        log "starting pgbouncer (transaction mode) on port $port in front of $version"
        as_pg_user pgbouncer -d "$dir/pgbouncer.ini"
        for _ in $(seq 50); do
            "$(bindir_of "$version")/psql" -X -q -At -c "SELECT 1" \
                "host=127.0.0.1 port=$port user=postgres dbname=postgres" >/dev/null 2>&1 && exit 0
            sleep 0.1
        done
        die "pgbouncer did not start (see $dir/pgbouncer.log)"
        ;;
    stop)
        if running; then kill "$(cat "$dir/pgbouncer.pid")"; fi
        ;;
    conninfo) echo "host=127.0.0.1 port=$port user=postgres" ;;
    *) die "usage: $0 start|stop|conninfo [pg18|pg15]" ;;
esac
