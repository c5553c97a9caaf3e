#!/usr/bin/env bash
# Golden SQL files (pg_regress) and isolation specs (pg_isolation_regress) against the
# running private cluster of one version, each in a fresh database.
#
#   scripts/test-sql.sh <pg18|pg15>
set -euo pipefail
source "$(dirname "$0")/env.sh"

version="${1:?usage: $0 <pg18|pg15>}"
pg_config=$(pg_config_of "$version")
pgxs="$("$pg_config" --pkglibdir)/pgxs/src/test"
out="$TARGET/sql-tests/$version"
rm -rf "$out" && mkdir -p "$out"
common=(--use-existing --host="$(socket_dir "$version")" --port="$(port_of "$version")"
        --user=postgres --bindir="$("$pg_config" --bindir)")
status=0

# --use-existing leaves databases alone, so each suite gets its fresh one here.
fresh_db() {
    local psql=("$("$pg_config" --bindir)/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo "$version") dbname=postgres")
    "${psql[@]}" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
    "${psql[@]/dbname=postgres/dbname=$1}" -c "CREATE EXTENSION pg_idempotency"
}

schedule() { sed -n 's/^test: //p' "$1" | tr ' ' '\n' | grep -v '^$'; }

log "$version: golden SQL files"
fresh_db pgidem_regress
"$pgxs/regress/pg_regress" "${common[@]}" --dbname=pgidem_regress \
    --inputdir="$ROOT/tests/regress" --outputdir="$out/regress" \
    $(schedule "$ROOT/tests/regress/schedule") || status=1

log "$version: isolation specs"
fresh_db pgidem_isolation
"$pgxs/isolation/pg_isolation_regress" "${common[@]}" --dbname=pgidem_isolation \
    --inputdir="$ROOT/tests/isolation" --outputdir="$out/isolation" \
    $(schedule "$ROOT/tests/isolation/schedule") || status=1

if [ $status -ne 0 ]; then
    find "$out" -name regression.diffs -exec cat {} \; | head -n 200 >&2
fi
exit $status
