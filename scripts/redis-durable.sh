#!/usr/bin/env bash
# A second private Redis for the peers benchmark, durable: `appendonly yes` with
# `appendfsync always`, so a write is fsync'd before Redis answers it (what a durable
# idempotency record needs; scripts/redis.sh runs Redis without persistence). Its files
# live under target/redis-durable; its port is REDIS_DURABLE_PORT (default 56499).
#
#   scripts/redis-durable.sh start|stop|port
set -euo pipefail
source "$(dirname "$0")/env.sh"

REDIS_DURABLE_PORT="${REDIS_DURABLE_PORT:-56499}"
dir="$TARGET/redis-durable"

case "${1:-}" in
    start)
        command -v redis-server >/dev/null || die "redis-server is not installed (scripts/setup.sh installs it as root)"
        mkdir -p "$dir"
        if [ -f "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then exit 0; fi
        log "starting durable redis (appendfsync always) on port $REDIS_DURABLE_PORT"
        redis-server --port "$REDIS_DURABLE_PORT" --bind 127.0.0.1 --dir "$dir" --daemonize yes \
            --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --save "" \
            --appendonly yes --appendfsync always
        for _ in $(seq 50); do redis-cli -p "$REDIS_DURABLE_PORT" ping >/dev/null 2>&1 && exit 0; sleep 0.1; done
        die "durable redis did not start (see $dir/redis.log)"
        ;;
    stop)
        [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
        ;;
    port) echo "$REDIS_DURABLE_PORT" ;;
    *) die "usage: $0 start|stop|port" ;;
esac
