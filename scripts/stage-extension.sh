#!/usr/bin/env bash
# Builds pg_idempotency (release) for a PostgreSQL with plain cargo, no cargo-pgrx, and lays
# out what CREATE EXTENSION needs in <dir>:
#   <dir>/lib/pg_idempotency.so
#   <dir>/extension/pg_idempotency.control           (@CARGO_VERSION@ replaced)
#   <dir>/extension/pg_idempotency--<version>.sql    (scripts/install-script.py)
#   <dir>/extension/pg_idempotency--<a>--<b>.sql     (the upgrade scripts)
#   <dir>/extension/pg_idempotency--0.1.0.sql        (the released base script)
# These are the files `cargo pgrx package` lays out (plus the released base script), byte
# for byte: scripts/test-staging.sh compares the two in the test command.
#
#   scripts/stage-extension.sh <pg18|pg15> <dir>
set -euo pipefail
source "$(dirname "$0")/env.sh"

version="${1:?usage: $0 <pg18|pg15> <dir>}"
dir="${2:?usage: $0 <pg18|pg15> <dir>}"
pg_config=$(pg_config_of "$version") || die "$version is not set up: run scripts/setup.sh"
crate="$ROOT/pg_idempotency"
cd "$ROOT"

# pgrx-pg-sys finds the server's headers through this pg_config (before any cargo-pgrx
# config). Its build script also watches $PGRX_HOME/config.toml, and reruns (bindgen, and
# every crate above it) on each build while that file is missing: one with no versions
# stands in until `cargo pgrx init` (which reads it, so it must parse) adds them.
export PGRX_PG_CONFIG_PATH="$pg_config"
mkdir -p "$PGRX_HOME"
[ -e "$PGRX_HOME/config.toml" ] || printf '[configs]\n' > "$PGRX_HOME/config.toml"

# cargo-pgrx builds the library with section garbage collection off (it keeps the schema
# section it reads); the same flag here builds the same bytes, and shares one build with
# `cargo pgrx package`.
cargo --config 'target.'\''cfg(all(target_family = "unix", not(target_os = "macos")))'\''.rustflags = ["-C", "link-arg=-Wl,--no-gc-sections"]' \
    build --release --lib -p pg_idempotency --features "$version" --no-default-features
lib="${CARGO_TARGET_DIR:-$ROOT/target}/release/libpg_idempotency.so"
[ -f "$lib" ] || die "cargo built no $lib"

# The version cargo-pgrx substitutes: the crate's (the workspace's) package version.
ext_version=$(cargo metadata --no-deps --format-version 1 --offline |
    python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "pg_idempotency"))')
# cargo-pgrx replaces these two tokens in the control file and the upgrade scripts; the
# commit hash is not reproduced here, so it must not be used.
filter() {
    ! grep -q '@GIT_HASH@' "$1" || die "$1 uses @GIT_HASH@, which this script does not replace"
    sed "s/@CARGO_VERSION@/$ext_version/g" "$1"
}

rm -rf "$dir" && mkdir -p "$dir/extension" "$dir/lib"
cp "$lib" "$dir/lib/pg_idempotency.so"
filter "$crate/pg_idempotency.control" > "$dir/extension/pg_idempotency.control"
python3 "$ROOT/scripts/install-script.py" "$crate" > "$dir/extension/pg_idempotency--$ext_version.sql"
for f in "$crate"/sql/pg_idempotency--*--*.sql; do
    filter "$f" > "$dir/extension/$(basename "$f")"
done
cp "$crate"/sql/released/pg_idempotency--*.sql "$dir/extension/"
