#!/usr/bin/env bash
# Installs the dependencies of the Node.js provider the web executor is tested against
# (tests/upstream-node: express with express-idempotency), with `npm ci`, only when its
# package-lock.json changed since the last install (a sha256 stamp kept in node_modules).
#
#   scripts/upstream-node.sh
#
# Without node or npm it says so and exits 0: client/tests/web/upstream_scenarios.rs then records its
# tests as skipped with that reason. Exits non-zero when npm ci fails.
set -euo pipefail
source "$(dirname "$0")/env.sh"

dir="$ROOT/tests/upstream-node"
lock="$dir/package-lock.json"
stamp="$dir/node_modules/.package-lock.sha256"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "upstream-node: node and npm are not installed; the web executor's tests against it will be skipped"
    exit 0
fi

mkdir -p "$TARGET"
# One install at a time when two runs start together.
(
    flock 9
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(sha256sum < "$lock")" ]; then
        exit 0
    fi
    log "upstream-node: npm ci ($dir)"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    sha256sum < "$lock" > "$stamp"
) 9> "$TARGET/.upstream-node-setup.lock"
