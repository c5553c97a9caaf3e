#!/usr/bin/env bash
# Builds pg_idempotency (release) and installs it where the private cluster loads it from:
#   pg18: staged in target/clusters/pg18/ext (extension_control_path, dynamic_library_path),
#         nothing written outside the project; built with plain cargo, no cargo-pgrx
#         (scripts/stage-extension.sh);
#   pg15: `cargo pgrx install` into the Debian server's folders (needs root).
# The base install script of 0.1.0 (pg_idempotency/sql/released/) goes along: with the
# upgrade scripts it installs every older release (`CREATE EXTENSION pg_idempotency
# VERSION '0.3.0'` runs it and the update path), so the updates from them can be tested.
# A running cluster is restarted, since the library is preloaded.
#
#   scripts/install-extension.sh <pg18|pg15>
set -euo pipefail
source "$(dirname "$0")/env.sh"

version="${1:?usage: $0 <pg18|pg15>}"
pg_config=$(pg_config_of "$version") || die "$version is not set up: run scripts/setup.sh"
cd "$ROOT/pg_idempotency"

case "$version" in
    pg18)
        log "building pg_idempotency for $version"
        ext="$(cluster_dir "$version")/ext"
        "$ROOT/scripts/stage-extension.sh" "$version" "$ext.new"
        [ -f "$ext.new/lib/pg_idempotency.so" ] || die "scripts/stage-extension.sh staged no library"
        # Swap the folder in whole: a running server keeps its open copy of the old library.
        rm -rf "$ext.old"; [ -d "$ext" ] && mv "$ext" "$ext.old"; mv "$ext.new" "$ext"; rm -rf "$ext.old"
        ;;
    pg15)
        is_root || die "installing into the Debian PostgreSQL 15 needs root"
        log "building and installing pg_idempotency for $version"
        # pgrx unlinks the old library first, so a running server keeps its mapped copy.
        cargo pgrx install --release --pg-config "$pg_config" --features "$version" --no-default-features >/dev/null
        cp "$ROOT"/pg_idempotency/sql/released/pg_idempotency--*.sql "$("$pg_config" --sharedir)/extension/"
        ;;
    *) die "unknown version '$version'" ;;
esac

if "$ROOT/scripts/cluster.sh" "$version" status >/dev/null 2>&1; then
    "$ROOT/scripts/cluster.sh" "$version" restart
fi
