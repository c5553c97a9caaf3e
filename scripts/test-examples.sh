#!/usr/bin/env bash
# The send_email examples in other languages (examples/python: psycopg 3 and pytest;
# examples/node: node-postgres and node:test) against a fresh database with one backend of
# the SQL API on the running private cluster of one version.
#
#   scripts/test-examples.sh <pg18|pg15> <extension|portable>
#
# EXAMPLES_DSN=<libpq conninfo>  use that database as it is (the SQL API installed there)
#                                instead of a fresh pgidem_examples on the private cluster
# PGIDEM_RESULTS=<file>          append one line per test to it (scripts/results.py)
# PGIDEM_EXAMPLES_THROUGH_POOLER=1
#                                connect through Debian's PgBouncer in transaction mode in
#                                front of the private cluster (scripts/pgbouncer.sh); the
#                                tests' names say so
#
# Sets up what is missing, once: a venv in target/examples/python-venv and
# examples/node/node_modules (again only when a dependency file changes). JUnit XML lands
# in target/examples/<version>-<backend>/. Without python3's venv module or node/npm, that
# language is skipped (not failed). Exits non-zero when a test failed.
set -euo pipefail
source "$(dirname "$0")/env.sh"

usage="usage: $0 <pg18|pg15> <extension|portable>"
version="${1:?$usage}"
backend="${2:?$usage}"
case "$version" in pg18|pg15) ;; *) die "$usage" ;; esac
case "$backend" in extension|portable) ;; *) die "$usage" ;; esac

pooled="${PGIDEM_EXAMPLES_THROUGH_POOLER:-}"
through="" && [ -n "$pooled" ] && through=" through PgBouncer"
out="$TARGET/examples/$version-$backend${pooled:+-pooled}"
rm -rf "$out" && mkdir -p "$out"

if [ -n "${EXAMPLES_DSN:-}" ]; then
    log "examples: using EXAMPLES_DSN as it is"
    dsn="$EXAMPLES_DSN"
else
    log "$version ($backend): fresh database pgidem_examples"
    PGOPTIONS="-c client_min_messages=warning" fresh_database "$version" pgidem_examples "$backend"
    dsn="$(conninfo "$version") dbname=pgidem_examples"
fi
if [ -n "$pooled" ]; then
    if ! command -v pgbouncer >/dev/null; then
        printf 'skip-missing\t%s\t%s\t%s\n' "$version ($backend): examples$through" "all tests" \
            "pgbouncer is not installed (Debian's pgbouncer: scripts/setup.sh installs it as root)" >> "${PGIDEM_RESULTS:-/dev/null}"
        exit 0
    fi
    "$ROOT/scripts/pgbouncer.sh" start "$version"
    # The same database, through the pooler (a keyword conninfo's dbname).
    [[ "$dsn" =~ dbname=([^ ]+) ]] || die "the examples' DSN names no dbname: $dsn"
    dsn="$("$ROOT/scripts/pgbouncer.sh" conninfo "$version") dbname=${BASH_REMATCH[1]}"
    # The examples' drivers configured for it (psycopg: prepare_threshold=None).
    export PGIDEM_STATEMENTS=unnamed
fi

status=0

skip_missing() { # <layer> <reason>
    log "$1: skipped: $2"
    if [ -n "${PGIDEM_RESULTS:-}" ]; then
        printf 'skip-missing\t%s\t%s\t%s\n' "$1" "all tests" "$2" >> "$PGIDEM_RESULTS"
    fi
}

# Per-test lines from a JUnit file; a run that wrote none counts as one failure.
record() { # <xml> <layer>
    [ -n "${PGIDEM_RESULTS:-}" ] && [ -f "$ROOT/scripts/results.py" ] || return 0
    if [ -s "$1" ]; then
        python3 "$ROOT/scripts/results.py" junit "$1" "$2"
    else
        python3 "$ROOT/scripts/results.py" add fail "$2" "all tests" "no JUnit report"
    fi
}

# Hash of a dependency file, kept beside what was installed from it.
same_stamp() { [ -f "$2" ] && [ "$(cat "$2")" = "$(sha256sum < "$1")" ]; }
write_stamp() { sha256sum < "$1" > "$2"; }

python_example() {
    local layer="$version ($backend): python example$through"
    local venv="$TARGET/examples/python-venv" req="$ROOT/examples/python/requirements.txt"
    if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        skip_missing "$layer" "python3 with its venv module is not installed"
        return 0
    fi
    mkdir -p "$TARGET/examples"
    # One setup at a time when two runs start together.
    if ! (
        flock 9
        if [ -x "$venv/bin/python" ] && same_stamp "$req" "$venv/.requirements.sha256"; then exit 0; fi
        log "examples: python venv ($venv)"
        python3 -m venv "$venv" &&
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" &&
        write_stamp "$req" "$venv/.requirements.sha256"
    ) 9> "$TARGET/examples/.python-setup.lock"; then
        log "$layer: installing the requirements failed"
        status=1
        return 0
    fi
    log "$layer"
    (cd "$ROOT/examples/python" &&
        PGIDEM_DSN="$dsn" PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -v \
            -p no:cacheprovider --junitxml="$out/python.xml" test_send_email.py) || status=1
    record "$out/python.xml" "$layer"
}

node_example() {
    local layer="$version ($backend): node example$through" dir="$ROOT/examples/node"
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        skip_missing "$layer" "node and npm are not installed"
        return 0
    fi
    if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
        skip_missing "$layer" "node $(node --version) is older than 20"
        return 0
    fi
    mkdir -p "$TARGET/examples"
    if ! (
        flock 9
        if same_stamp "$dir/package-lock.json" "$dir/node_modules/.package-lock.sha256"; then exit 0; fi
        log "examples: npm ci ($dir)"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) &&
        write_stamp "$dir/package-lock.json" "$dir/node_modules/.package-lock.sha256"
    ) 9> "$TARGET/examples/.node-setup.lock"; then
        log "$layer: npm ci failed"
        status=1
        return 0
    fi
    log "$layer"
    (cd "$dir" &&
        PGIDEM_DSN="$dsn" node --test --test-reporter=spec --test-reporter-destination=stdout \
            --test-reporter=junit --test-reporter-destination="$out/node.xml" \
            send_email.test.js) || status=1
    record "$out/node.xml" "$layer"
}

python_example
node_example
exit $status
