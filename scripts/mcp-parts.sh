#!/usr/bin/env bash
# Installs the real MCP parts the MCP proxy (pg-idempotency-mcp) is tested against, pinned:
#   - tests/mcp-parts/node: @modelcontextprotocol/sdk (for ts_client.mjs) and the reference
#     servers server-memory, server-filesystem and server-everything, with `npm ci` from the committed
#     package-lock.json, into tests/mcp-parts/node/node_modules;
#   - the official Python SDK (mcp==2.3.0, dependencies pinned by
#     tests/mcp-parts/python/constraints.txt) into a venv at target/mcp-venv, for
#     counting_server.py and py_client.py.
# Each is installed only when its lock (or requirements) changed since the last install: a
# sha256 stamp is kept beside it. One install at a time (flock) when two runs start together.
#
#   scripts/mcp-parts.sh          install what changed; prints nothing when all is up to date
#   scripts/mcp-parts.sh paths    prints where the parts are, one NAME=value a line:
#       MCP_PARTS_DIR   tests/mcp-parts (counting_server.py, py_client.py, ts_client.mjs)
#       MCP_NODE_DIR    tests/mcp-parts/node, or empty when the node parts are not installed
#       MCP_NODE_BIN    its node_modules/.bin (mcp-server-memory, mcp-server-filesystem), or empty
#       MCP_PYTHON      the venv's python, or empty when the Python SDK is not installed
#
# Without node and npm, or without a python3 (3.10 or later) that can make a venv, it says
# so and goes on (exit 0): the tests that need that part skip. Exits non-zero when npm ci or
# pip fails.
set -euo pipefail
source "$(dirname "$0")/env.sh"

parts="$ROOT/tests/mcp-parts"
node_dir="$parts/node"
node_lock="$node_dir/package-lock.json"
node_stamp="$node_dir/node_modules/.package-lock.sha256"
venv="$TARGET/mcp-venv"
py_stamp="$venv/.requirements.sha256"
python="${PYTHON:-python3}"

have_node() { command -v node >/dev/null && command -v npm >/dev/null; }
have_python() {
    command -v "$python" >/dev/null &&
        "$python" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null
}
node_installed() { [ -f "$node_stamp" ] && [ "$(cat "$node_stamp")" = "$(sha256sum < "$node_lock")" ]; }
# What the venv is made of: the requirements, their constraints and the interpreter's version.
py_fingerprint() {
    { cat "$parts/python/requirements.txt" "$parts/python/constraints.txt"; "$python" -V 2>&1; } | sha256sum
}
py_installed() { [ -x "$venv/bin/python" ] && [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$(py_fingerprint)" ]; }

if [ "${1:-}" = paths ]; then
    echo "MCP_PARTS_DIR=$parts"
    if [ -f "$node_stamp" ]; then
        echo "MCP_NODE_DIR=$node_dir"
        echo "MCP_NODE_BIN=$node_dir/node_modules/.bin"
    else
        echo "MCP_NODE_DIR="
        echo "MCP_NODE_BIN="
    fi
    if [ -x "$venv/bin/python" ] && [ -f "$py_stamp" ]; then echo "MCP_PYTHON=$venv/bin/python"; else echo "MCP_PYTHON="; fi
    exit 0
fi
[ $# -eq 0 ] || die "usage: scripts/mcp-parts.sh [paths]"

mkdir -p "$TARGET"
(
    flock 9
    if ! have_node; then
        log "mcp-parts: node and npm are not installed; the tests with the TypeScript SDK and the reference MCP servers will be skipped"
    elif ! node_installed; then
        log "mcp-parts: npm ci ($node_dir)"
        (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
        sha256sum < "$node_lock" > "$node_stamp"
    fi

    if ! have_python; then
        log "mcp-parts: no $python (3.10 or later) with venv support; the tests with the Python SDK will be skipped"
    elif ! py_installed; then
        log "mcp-parts: a fresh venv with the MCP Python SDK ($venv)"
        rm -rf "$venv"
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            -r "$parts/python/requirements.txt"
        py_fingerprint > "$py_stamp"
    fi
) 9> "$TARGET/.mcp-parts-setup.lock"
