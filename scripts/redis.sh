#!/usr/bin/env bash
# A private Redis for the RedisStore tests: Debian's redis-server, on its own port, with its
# files under target/redis, nothing persisted.
#
#   scripts/redis.sh start|stop|url
set -euo pipefail
source "$(dirname "$0")/env.sh"

REDIS_PORT="${REDIS_PORT:-56379}"
dir="$TARGET/redis"

case "${1:-}" in
    start)
        command -v redis-server >/dev/null || die "redis-server is not installed (scripts/setup.sh installs it as root)"
        mkdir -p "$dir"
        if [ -f "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then exit 0; fi
        log "starting redis on port $REDIS_PORT"
        redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$dir" --daemonize yes \
            --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --save "" --appendonly no
        for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && exit 0; sleep 0.1; done
        die "redis did not start (see $dir/redis.log)"
        ;;
    stop)
        [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
        ;;
    url) echo "redis://127.0.0.1:$REDIS_PORT/" ;;
    *) die "usage: $0 start|stop|url" ;;
esac
