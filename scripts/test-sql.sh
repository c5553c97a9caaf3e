#!/usr/bin/env bash
# Golden SQL files (pg_regress) and isolation specs (pg_isolation_regress) against the
# running private cluster of one version, each in a fresh database with one backend.
#
#   scripts/test-sql.sh <pg18|pg15> [extension|portable]
set -euo pipefail
source "$(dirname "$0")/env.sh"

version="${1:?usage: $0 <pg18|pg15> [extension|portable]}"
backend="${2:-extension}"
pg_config=$(pg_config_of "$version")
pgxs="$("$pg_config" --pkglibdir)/pgxs/src/test"
out="$TARGET/sql-tests/$version/$backend"
rm -rf "$out" && mkdir -p "$out"

# The golden files show each error's SQLSTATE, message, detail and hint (VERBOSITY
# verbose); its LOCATION line names the C source line that raised it, which differs between
# the backends and is no part of the contract, so pg_regress runs a psql without it.
golden_bin="$out/bin"
mkdir -p "$golden_bin"
cat > "$golden_bin/psql" <<WRAP
#!/usr/bin/env bash
set -o pipefail
"$("$pg_config" --bindir)/psql" "\$@" 2>&1 | sed '/^LOCATION:  /d'
WRAP
chmod +x "$golden_bin/psql"

common=(--use-existing --host="$(socket_dir "$version")" --port="$(port_of "$version")"
        --user=postgres)
status=0

schedule() { sed -n 's/^test: //p' "$1" | tr ' ' '\n' | grep -v '^$'; }
# tests/regress/schedule runs on both backends; schedule_extension only on the extension.

# Each test's verdict goes to the test command's results file (scripts/results.py) when
# PGIDEM_RESULTS names one.
record() { if [ -n "${PGIDEM_RESULTS:-}" ]; then python3 "$ROOT/scripts/results.py" "$@"; fi; }

log "$version ($backend): golden SQL files"
fresh_database "$version" pgidem_regress "$backend"
extension_only=()
if [ "$backend" = extension ]; then
    extension_only=($(schedule "$ROOT/tests/regress/schedule_extension"))
else
    for t in $(schedule "$ROOT/tests/regress/schedule_extension"); do
        record add skip "$version ($backend): golden SQL" "$t" \
            "extension only (tests/regress/schedule_extension): the portable variant does not count the refusals it raises, and has no CREATE EXTENSION"
    done
fi
"$pgxs/regress/pg_regress" "${common[@]}" --bindir="$golden_bin" --dbname=pgidem_regress \
    --inputdir="$ROOT/tests/regress" --outputdir="$out/regress" \
    $(schedule "$ROOT/tests/regress/schedule") "${extension_only[@]}" 2>&1 | tee "$out/regress.log" || status=1
record regress "$out/regress.log" "$version ($backend): golden SQL"

log "$version ($backend): isolation specs"
fresh_database "$version" pgidem_isolation "$backend"
"$pgxs/isolation/pg_isolation_regress" "${common[@]}" --bindir="$("$pg_config" --bindir)" \
    --dbname=pgidem_isolation \
    --inputdir="$ROOT/tests/isolation" --outputdir="$out/isolation" \
    $(schedule "$ROOT/tests/isolation/schedule") 2>&1 | tee "$out/isolation.log" || status=1
record regress "$out/isolation.log" "$version ($backend): isolation specs"

if [ $status -ne 0 ]; then
    find "$out" -name regression.diffs -exec cat {} \; | head -n 300 >&2
fi
exit $status
