#!/usr/bin/env bash
# Installs the peers the benchmark's `peers` workload measures pg_idempotency against, each
# from its registry, pinned:
#   - bench/peers/python/requirements.txt (exact versions: AWS Powertools for Lambda with its
#     Redis extra, boto3 that it imports, idemkit with asyncpg, psycopg 3 for our SQL API)
#     into a venv at target/peers-venv, and beside them the pg-idempotency package from this
#     checkout (python/: a wheel built from it, --no-deps: its dependencies are pinned in
#     the requirements);
#   - bench/peers/node (@node-idempotency/core with its Redis adapter, express-idempotency,
#     node-postgres) with `npm ci` from the committed package-lock.json.
# Each is installed only when its requirements (or lock, or for pg-idempotency its sources)
# changed since the last install: a sha256 stamp is kept beside it. One install at a time (flock) when two runs start together.
#
#   scripts/peers.sh          install what changed; prints nothing when all is up to date
#   scripts/peers.sh paths    prints where the drivers and their interpreters are, NAME=value:
#       PEERS_PYTHON          the venv's python, or empty when it is not installed
#       PEERS_PY_DRIVER       bench/peers/python/driver.py
#       PEERS_NODE            node, or empty when the node peers are not installed
#       PEERS_NODE_DRIVER     bench/peers/node/driver.js
#
# Without node and npm, or without a python3 that can make a venv, it says so and goes on
# (exit 0): the benchmark reports those rows skipped, with that reason. Exits non-zero when
# npm ci or pip fails.
set -euo pipefail
source "$(dirname "$0")/env.sh"

peers="$ROOT/bench/peers"
node_dir="$peers/node"
node_lock="$node_dir/package-lock.json"
node_stamp="$node_dir/node_modules/.package-lock.sha256"
requirements="$peers/python/requirements.txt"
venv="$TARGET/peers-venv"
py_stamp="$venv/.requirements.sha256"
package="$ROOT/python"
package_stamp="$venv/.pg-idempotency.sha256"
python="${PYTHON:-python3}"

have_node() { command -v node >/dev/null && command -v npm >/dev/null; }
have_python() {
    command -v "$python" >/dev/null &&
        "$python" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 9))' 2>/dev/null
}
node_installed() { [ -f "$node_stamp" ] && [ "$(cat "$node_stamp")" = "$(sha256sum < "$node_lock")" ]; }
py_fingerprint() { { cat "$requirements"; "$python" -V 2>&1; } | sha256sum; }
py_installed() { [ -x "$venv/bin/python" ] && [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$(py_fingerprint)" ]; }
# The package's build: its pyproject and every file of its sources, by path and content.
package_fingerprint() {
    (cd "$package" && find pyproject.toml README.md src -type f ! -name '*.pyc' | LC_ALL=C sort |
        xargs sha256sum) | sha256sum
}
package_installed() { [ -f "$package_stamp" ] && [ "$(cat "$package_stamp")" = "$(package_fingerprint)" ]; }

if [ "${1:-}" = paths ]; then
    if [ -x "$venv/bin/python" ] && [ -f "$py_stamp" ]; then echo "PEERS_PYTHON=$venv/bin/python"; else echo "PEERS_PYTHON="; fi
    echo "PEERS_PY_DRIVER=$peers/python/driver.py"
    if [ -f "$node_stamp" ] && have_node; then echo "PEERS_NODE=$(command -v node)"; else echo "PEERS_NODE="; fi
    echo "PEERS_NODE_DRIVER=$node_dir/driver.js"
    exit 0
fi
[ $# -eq 0 ] || die "usage: scripts/peers.sh [paths]"

mkdir -p "$TARGET"
(
    flock 9
    if ! have_node; then
        log "peers: node and npm are not installed; the Node.js peers will be reported skipped"
    elif ! node_installed; then
        log "peers: npm ci ($node_dir)"
        (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
        sha256sum < "$node_lock" > "$node_stamp"
    fi

    if ! have_python; then
        log "peers: no $python with venv support; the Python peers will be reported skipped"
    elif ! py_installed; then
        log "peers: a fresh venv with the Python peers ($venv)"
        rm -rf "$venv"
        "$python" -m venv "$venv"
        # --no-deps: the requirements list every package, dependencies included, at an
        # exact version, so pip installs exactly that set.
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            -r "$requirements"
        py_fingerprint > "$py_stamp"
    fi
    if have_python && ! package_installed; then
        log "peers: pg-idempotency from $package"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            --force-reinstall "$package"
        package_fingerprint > "$package_stamp"
    fi
) 9> "$TARGET/.peers-setup.lock"
