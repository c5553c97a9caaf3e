#!/usr/bin/env bash
# The demo builds the extension with plain cargo (scripts/stage-extension.sh), the Debian
# package and the Docker image with `cargo pgrx package`: this compares the two ways' files
# byte for byte, so they cannot drift. One test per file (it is in both, with the same
# bytes), and one that the two folders hold the same files (diff -r).
#
#   scripts/test-staging.sh <pg18|pg15>
# Each test goes to the test command's results file when PGIDEM_RESULTS names one.
set -euo pipefail
source "$(dirname "$0")/env.sh"

version="${1:?usage: $0 <pg18|pg15>}"
layer="$version: the demo's build (plain cargo) against cargo pgrx package"
record() { if [ -n "${PGIDEM_RESULTS:-}" ]; then python3 "$ROOT/scripts/results.py" "$@"; fi; }

pg_config=$(pg_config_of "$version") || die "$version is not set up: run scripts/setup.sh"
if ! cargo pgrx --version >/dev/null 2>&1; then
    reason="cargo-pgrx is not installed (scripts/setup.sh installs it)"
    record add skip-missing "$layer" "every file" "$reason"; log "skipped: $reason"; exit 0
fi

work="$TARGET/staging-test"
rm -rf "$work" && mkdir -p "$work"

# cargo-pgrx's way, laid out as the cluster loads it: the control and SQL files in
# extension/, the library in lib/, and the released base script beside them (copied by
# hand before the plain build existed, and still so for pg15). The same pg_config in the
# environment as the plain build's, so that both share one build.
log "cargo pgrx package ($version)"
(cd "$ROOT/pg_idempotency" && PGRX_PG_CONFIG_PATH="$pg_config" cargo pgrx package --pg-config "$pg_config" \
    --features "$version" --no-default-features --out-dir "$work/package") > "$work/package.log" 2>&1 ||
    { tail -n 20 "$work/package.log" >&2; die "cargo pgrx package failed (log: $work/package.log)"; }
mkdir -p "$work/pgrx/extension" "$work/pgrx/lib"
find "$work/package" -path '*/extension/*' -type f -exec cp {} "$work/pgrx/extension/" \;
find "$work/package" -name '*.so' -type f -exec cp {} "$work/pgrx/lib/" \;
cp "$ROOT"/pg_idempotency/sql/released/pg_idempotency--*.sql "$work/pgrx/extension/"

log "scripts/stage-extension.sh $version"
"$ROOT/scripts/stage-extension.sh" "$version" "$work/plain" > "$work/plain.log" 2>&1 ||
    { tail -n 20 "$work/plain.log" >&2; die "scripts/stage-extension.sh failed (log: $work/plain.log)"; }

failed=0
files=$( (cd "$work/pgrx" && find . -type f; cd "$work/plain" && find . -type f) | sort -u)
for f in $files; do
    name="${f#./}"
    if [ ! -f "$work/pgrx/$f" ]; then
        record add fail "$layer" "$name" "staged by scripts/stage-extension.sh, not by cargo pgrx package"; failed=1
    elif [ ! -f "$work/plain/$f" ]; then
        record add fail "$layer" "$name" "laid out by cargo pgrx package, missing from scripts/stage-extension.sh's"; failed=1
    elif ! cmp "$work/pgrx/$f" "$work/plain/$f"; then
        diff "$work/pgrx/$f" "$work/plain/$f" 2>/dev/null | head -n 20 || true
        record add fail "$layer" "$name" "the bytes differ ($(cmp "$work/pgrx/$f" "$work/plain/$f" 2>&1 | head -n1))"; failed=1
    else
        echo "same: $name"
        record add pass "$layer" "$name"
    fi
done
# The whole folders, for a summary that cannot miss a file the loop above might (a name
# with spaces, say).
if diff -r "$work/pgrx" "$work/plain"; then
    record add pass "$layer" "diff -r of the two folders"
else
    record add fail "$layer" "diff -r of the two folders" "they differ: diff -r $work/pgrx $work/plain"; failed=1
fi
[ "$(ls "$work/plain/extension" | wc -l)" -ge 4 ] && [ -f "$work/plain/lib/pg_idempotency.so" ] ||
    { record add fail "$layer" "what is staged" "fewer files than a control file, install, upgrade and base scripts and a library"; failed=1; }
exit $failed
