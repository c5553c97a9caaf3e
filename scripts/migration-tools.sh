#!/usr/bin/env bash
# Installs the real migration tools the portable variant's plain-SQL migrations are tested
# with (tests/tests/migration_tools.rs), pinned, under target/migration-tools/:
#   - node/: dbmate and node-pg-migrate (with node-postgres), `npm ci` from the committed
#     tests/migration-tools/node/package-lock.json;
#   - python-venv/: Alembic with SQLAlchemy and psycopg 3, from
#     tests/migration-tools/python/requirements.txt under constraints.txt.
# Each is installed again only when its lock (or requirements) changed: a sha256 stamp is
# kept beside it. One install at a time (flock) when two runs start together.
#
#   scripts/migration-tools.sh
#
# Without node and npm, or without a python3 that can make a venv, it says so and goes on
# (exit 0): the tests of that tool are reported skipped, with the reason. Exits non-zero
# when npm ci or pip fails.
set -euo pipefail
source "$(dirname "$0")/env.sh"

src="$ROOT/tests/migration-tools"
out="$TARGET/migration-tools"
node_dir="$out/node"
node_stamp="$node_dir/node_modules/.package-lock.sha256"
venv="$out/python-venv"
py_stamp="$venv/.requirements.sha256"
python="${PYTHON:-python3}"

have_node() { command -v node >/dev/null && command -v npm >/dev/null; }
have_python() { command -v "$python" >/dev/null && "$python" -c 'import venv, ensurepip' 2>/dev/null; }
node_fingerprint() { cat "$src/node/package.json" "$src/node/package-lock.json" | sha256sum; }
py_fingerprint() {
    { cat "$src/python/requirements.txt" "$src/python/constraints.txt"; "$python" -V 2>&1; } | sha256sum
}

[ $# -eq 0 ] || die "usage: scripts/migration-tools.sh"
mkdir -p "$out"
(
    flock 9
    if ! have_node; then
        log "migration-tools: node and npm are not installed; the dbmate and node-pg-migrate tests will be skipped"
    elif ! { [ -f "$node_stamp" ] && [ "$(cat "$node_stamp")" = "$(node_fingerprint)" ]; }; then
        log "migration-tools: npm ci ($node_dir)"
        rm -rf "$node_dir" && mkdir -p "$node_dir"
        cp "$src/node/package.json" "$src/node/package-lock.json" "$node_dir/"
        (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
        node_fingerprint > "$node_stamp"
    fi

    if ! have_python; then
        log "migration-tools: no $python with venv support; the Alembic tests will be skipped"
    elif ! { [ -x "$venv/bin/alembic" ] && [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$(py_fingerprint)" ]; }; then
        log "migration-tools: a fresh venv with Alembic ($venv)"
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -r "$src/python/requirements.txt" -c "$src/python/constraints.txt"
        py_fingerprint > "$py_stamp"
    fi
) 9> "$out/.setup.lock"
