#!/usr/bin/env bash
# The Python package pg-idempotency (python/): built as a user gets it and tested against a
# real database.
#
#   scripts/test-python.sh checks
#       ruff and mypy --strict over the sources; the wheel and the sdist built; the wheel,
#       with every extra, installed into a fresh virtual environment (target/python/venv)
#       with the tests' pinned requirements (python/requirements/*.txt but tools.txt), and
#       the sdist into another (target/python/sdist-venv). Fresh once per test command
#       (PGIDEM_RUN_ID, set by scripts/test.sh), or when the sources changed.
#   scripts/test-python.sh <pg18|pg15> <extension|portable> [--ends]
#       the package's pytest suite (python/tests/), run by the installed wheel against a
#       fresh database with that backend on the running private cluster. With --ends, also
#       the sdist's own tests (its lifecycle file) from its unpacked copy, and the behaviour
#       tests on the oldest and newest Python the package supports (scripts/test.sh asks
#       for them on one pass, in the lane that has room).
#
# PGIDEM_RESULTS=<file>  append one line per test (scripts/results.py, from JUnit XML)
# PGIDEM_PYTHON_THROUGH_POOLER=1
#       connect through Debian's PgBouncer in transaction mode (scripts/pgbouncer.sh), with
#       no prepared statements (prepare=False); the tests' names say so
#
# Without python3's venv module the whole layer is skipped, with that reason. Exits
# non-zero when a check or a test failed.
set -euo pipefail
source "$(dirname "$0")/env.sh"

usage="usage: $0 checks | <pg18|pg15> <extension|portable>"
mode="${1:?$usage}"
py="$ROOT/python"
out="$TARGET/python"
tools="$out/tools-venv"
venv="$out/venv"
sdist_venv="$out/sdist-venv"
dist="$out/dist"
mkdir -p "$out"

record_skip() { # <layer> <reason>
    log "$1: skipped: $2"
    if [ -n "${PGIDEM_RESULTS:-}" ]; then
        python3 "$ROOT/scripts/results.py" add skip-missing "$1" "all tests" "$2"
    fi
}

record() { # <xml> <layer>
    [ -n "${PGIDEM_RESULTS:-}" ] || return 0
    if [ -s "$1" ]; then
        python3 "$ROOT/scripts/results.py" junit "$1" "$2"
    else
        python3 "$ROOT/scripts/results.py" add fail "$2" "all tests" "no JUnit report"
    fi
}

if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    record_skip "Python package" "python3 with its venv module is not installed (scripts/setup.sh installs python3-venv as root)"
    exit 0
fi

pip_install() { # <venv> <args...>
    local v="$1"; shift
    "$v/bin/python" -m pip install -q --disable-pip-version-check "$@"
}

# What a fresh install depends on: the sources and the pins. A change makes the
# environments again; so does a new test command (PGIDEM_RUN_ID).
fingerprint() {
    { echo "${PGIDEM_RUN_ID:-}"; python3 -V
      find "$py/src" "$py/tests" "$py/pyproject.toml" "$py/README.md" "$py/requirements" \
          -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum; } | sha256sum
}

# The tools' environment (ruff, mypy, build): kept while its pins are the same. mypy
# reads the drivers' own type information, so the test pins are installed beside them.
tools_env() {
    local stamp="$tools/.requirements.sha256" want
    want=$(cat "$py"/requirements/*.txt | sha256sum)
    if [ -x "$tools/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
    log "python: the tools' environment ($tools)"
    rm -rf "$tools" && python3 -m venv "$tools"
    local reqs=()
    for f in "$py"/requirements/*.txt; do
        case "$(basename "$f")" in frameworks.txt) ;; *) reqs+=(-r "$f") ;; esac
    done
    pip_install "$tools" "${reqs[@]}"
    echo "$want" > "$stamp"
}

# The wheel and the sdist, and the two fresh environments a user's pip install makes.
build_and_install() {
    local stamp="$out/.installed.sha256" want
    want=$(fingerprint)
    if [ -x "$venv/bin/python" ] && [ -x "$sdist_venv/bin/python" ] &&
        [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return 0
    fi
    tools_env
    log "python: the wheel and the sdist ($dist)"
    rm -rf "$dist" "$stamp"
    # No isolation: the build backend is the pinned one in the tools' environment (an
    # isolated build would fetch hatchling again on every run).
    (cd "$py" && "$tools/bin/python" -m build --no-isolation --outdir "$dist" . \
        > "$out/build.log" 2>&1) || { cat "$out/build.log"; return 1; }
    local wheel sdist
    wheel=$(ls "$dist"/*.whl) && sdist=$(ls "$dist"/*.tar.gz)
    log "python: the wheel into a fresh environment ($venv)"
    rm -rf "$venv" && python3 -m venv "$venv"
    local reqs=()
    for f in "$py"/requirements/*.txt; do
        case "$(basename "$f")" in tools.txt) ;; *) reqs+=(-r "$f") ;; esac
    done
    pip_install "$venv" "$wheel[binary,asyncpg,sqlalchemy,httpx,pydantic]" "${reqs[@]}"
    log "python: the sdist into a fresh environment ($sdist_venv)"
    rm -rf "$sdist_venv" "$out/sdist" && python3 -m venv "$sdist_venv"
    pip_install "$sdist_venv" "$sdist" -r "$py/requirements/test.txt"
    mkdir -p "$out/sdist" && tar -xzf "$sdist" -C "$out/sdist" --strip-components=1
    echo "$want" > "$stamp"
}

ensure_installed() {
    # One build at a time: the two PostgreSQL versions' lanes arrive together.
    ( flock 9; build_and_install ) 9> "$out/.install.lock"
}

checks() {
    local status=0 layer="Python package: checks"
    ensure_installed
    ( cd "$py" && "$tools/bin/ruff" check src tests ) || status=1
    ( cd "$py" && "$tools/bin/mypy" ) || status=1
    # The installed package is the wheel's, with its py.typed, and pip finds its
    # dependencies consistent.
    "$venv/bin/python" -m pip check --disable-pip-version-check || status=1
    "$venv/bin/python" - "$venv" <<'EOF' || status=1
import pathlib, sys
import pg_idempotency
where = pathlib.Path(pg_idempotency.__file__).resolve()
assert str(where).startswith(str(pathlib.Path(sys.argv[1]).resolve())), where
assert (where.parent / "py.typed").exists(), "py.typed is missing from the wheel"
print(f"pg_idempotency {pg_idempotency.__version__} from {where.parent}")
EOF
    if [ -n "${PGIDEM_RESULTS:-}" ]; then
        python3 "$ROOT/scripts/results.py" add "$([ $status -eq 0 ] && echo pass || echo fail)" \
            "$layer" "ruff, mypy --strict, the wheel (py.typed, pip check) and the sdist built and installed"
    fi
    return $status
}

suite() {
    local version="$1" backend="$2" ends="${3:-}" db="pgidem_python" dsn through="" status=0
    local pooled="${PGIDEM_PYTHON_THROUGH_POOLER:-}"
    [ -n "$pooled" ] && through=" through PgBouncer"
    local layer="$version ($backend): Python package$through"
    ensure_installed
    PGOPTIONS="-c client_min_messages=warning" fresh_database "$version" "$db" "$backend"
    dsn="$(conninfo "$version") dbname=$db"
    local env_vars=(PGIDEM_BACKEND="$backend" PYTHONDONTWRITEBYTECODE=1)
    if [ -n "$pooled" ]; then
        if ! command -v pgbouncer >/dev/null; then
            record_skip "$layer" "pgbouncer is not installed (Debian's pgbouncer: scripts/setup.sh installs it as root)"
            return 0
        fi
        "$ROOT/scripts/pgbouncer.sh" start "$version"
        dsn="$("$ROOT/scripts/pgbouncer.sh" conninfo "$version") dbname=$db"
        env_vars+=(PGIDEM_STATEMENTS=unnamed PGIDEM_THROUGH_POOLER=1)
    fi
    local xml="$out/$version-$backend${pooled:+-pooled}.xml"
    rm -f "$xml"
    log "$layer"
    (cd "$py" && env "${env_vars[@]}" PGIDEM_DSN="$dsn" "$venv/bin/python" -m pytest -q \
        -p no:cacheprovider --junitxml="$xml" -o junit_suite_name="$layer" tests) || status=1
    record "$xml" "$layer"
    if [ "$ends" = --ends ] && [ -z "$pooled" ]; then
        local sxml="$out/sdist.xml" slayer="$version ($backend): Python package from its sdist"
        log "$slayer"
        (cd "$out/sdist" && env "${env_vars[@]}" PGIDEM_DSN="$dsn" "$sdist_venv/bin/python" -m pytest -q \
            -p no:cacheprovider --junitxml="$sxml" tests/behaviour/test_lifecycle.py) || status=1
        record "$sxml" "$slayer"
        other_pythons "$version ($backend)" "$dsn" || status=1
    fi
    return $status
}

# The oldest and the newest Python the package supports, beside the machine's: the wheel
# and the core pins into a fresh environment of each, and the behaviour tests (not the
# frameworks'). Where an interpreter is not installed, its tests are skipped, saying so.
SUPPORTED_ENDS=(3.10 3.13)

interpreter_of() { # <major.minor>: its python, or nothing
    local v="$1" found
    if "python$v" -V >/dev/null 2>&1; then command -v "python$v"; return 0; fi
    found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}/versions/$v".*/bin/"python$v" 2>/dev/null | sort -V | tail -n 1)
    [ -n "$found" ] && echo "$found"
}

other_pythons() { # <layer prefix> <dsn>
    local prefix="$1" dsn="$2" status=0 v interp env_dir xml layer
    for v in "${SUPPORTED_ENDS[@]}"; do
        layer="$prefix: Python package on Python $v"
        interp=$(interpreter_of "$v") || true
        if [ -z "$interp" ]; then
            log "$layer: skipped: no python$v here"
            [ -z "${PGIDEM_RESULTS:-}" ] || python3 "$ROOT/scripts/results.py" add skip "$layer" \
                "all tests" "Python $v is not installed on this machine (the machine's own is $(python3 -V 2>&1))"
            continue
        fi
        env_dir="$out/venv-$v"
        if ! ( flock 9
               want=$(fingerprint)
               if [ -x "$env_dir/bin/python" ] && [ "$(cat "$env_dir/.stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi
               log "python: the wheel into a fresh Python $v environment ($env_dir)"
               rm -rf "$env_dir" && "$interp" -m venv "$env_dir" &&
               pip_install "$env_dir" "$(ls "$dist"/*.whl)[binary,pydantic]" -r "$py/requirements/test.txt" &&
               echo "$want" > "$env_dir/.stamp" ) 9> "$out/.install-$v.lock"; then
            [ -z "${PGIDEM_RESULTS:-}" ] || python3 "$ROOT/scripts/results.py" add fail "$layer" \
                "all tests" "installing the wheel into Python $v failed"
            status=1
            continue
        fi
        xml="$out/python-$v.xml"
        log "$layer"
        (cd "$py" && env "${env_vars[@]}" PGIDEM_DSN="$dsn" \
            "$env_dir/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$xml" tests/behaviour) || status=1
        record "$xml" "$layer"
    done
    return $status
}

case "$mode" in
    checks) checks ;;
    pg18|pg15) suite "$mode" "${2:?$usage}" "${3:-}" ;;
    *) die "$usage" ;;
esac
