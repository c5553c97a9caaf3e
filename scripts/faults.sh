#!/usr/bin/env bash
# The full run of the fault suite (tests/faults/): every scenario with about ten times the
# trials the test command runs, on PostgreSQL 18 and 15, against the extension and the
# portable variant; writes docs/reliability.md from what each scenario tallied.
#
#   scripts/faults.sh [pg18|pg15 ...]      PGIDEM_FAULT_SCALE=10 by default
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

if [ $# -gt 0 ]; then versions=("$@"); else versions=(pg18 pg15); fi
"$ROOT/scripts/setup.sh" "$([ " ${versions[*]} " = " pg18 " ] && echo pg18 || echo all)"
if [[ " ${versions[*]} " == *" pg15 "* ]] && ! pg15_usable; then
    log "$(pg15_missing_reason): running PostgreSQL 18 only"
    versions=(pg18)
fi

export PGIDEM_FAULT_SCALE="${PGIDEM_FAULT_SCALE:-10}"
export PGIDEM_FAULT_REPORT="$TARGET/faults/report.tsv"
mkdir -p "$TARGET/faults" && : > "$PGIDEM_FAULT_REPORT"
start=$SECONDS
status=0
for v in "${versions[@]}"; do
    "$ROOT/scripts/install-extension.sh" "$v"
    "$ROOT/scripts/cluster.sh" "$v" start
    for b in extension portable; do
        log "$v ($b): fault suite, trials x$PGIDEM_FAULT_SCALE"
        fresh_database "$v" pgidem_it "$b"
        PGIDEM_DSN="$(conninfo "$v") dbname=pgidem_it" PGIDEM_BINDIR="$(bindir_of "$v")" \
            PGIDEM_BACKEND="$b" cargo test --release --no-fail-fast -p pg_idempotency_faults \
            -- --test-threads 1 || status=1
    done
done
python3 "$ROOT/scripts/faults_report.py" "$PGIDEM_FAULT_REPORT" "$((SECONDS - start))" \
    "$PGIDEM_FAULT_SCALE" "$ROOT/docs/reliability.md"
log "wrote docs/reliability.md"
exit $status
