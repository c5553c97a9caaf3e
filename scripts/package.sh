#!/usr/bin/env bash
# Builds the Debian package of the extension for Debian's PostgreSQL:
#   target/debian/postgresql-<NN>-pg-idempotency_<version>_<arch>.deb
# from `cargo pgrx package` (release) and the released base install script
# (pg_idempotency/sql/released/), which scripts/install-extension.sh installs too: with the
# upgrade scripts it lets `CREATE EXTENSION ... VERSION` install an older release and
# `ALTER EXTENSION ... UPDATE` take it to this one.
# Needs no root (dpkg-deb --root-owner-group makes the files root's in the package).
#
#   scripts/package.sh [<pg_config>]     default: Debian's PostgreSQL 15
#                                        (/usr/lib/postgresql/15/bin/pg_config)
# Prints the path of the .deb on its last line.
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/debian.sh"

pg_config="${1:-$PG15_PG_CONFIG}"
[ -x "$pg_config" ] || die "no pg_config at $pg_config (Debian's postgresql-server-dev-NN)"
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing: the Debian package is built on Debian"

major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
[[ "$major" =~ ^[0-9]+$ ]] || die "cannot read the major version from '$("$pg_config" --version)'"
# Debian's name for an extension of one server version: postgresql-<NN>-<extension>, with
# a hyphen where the extension's name has an underscore (package names allow no underscore).
name="postgresql-$major-pg-idempotency"
version=$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "pg_idempotency"))')
arch=$(dpkg --print-architecture)
libdir=$("$pg_config" --pkglibdir)
extdir="$("$pg_config" --sharedir)/extension"

log "building pg_idempotency $version for PostgreSQL $major (cargo pgrx package, release)"
(cd "$ROOT/pg_idempotency" &&
    cargo pgrx package --pg-config "$pg_config" --features "pg$major" --no-default-features >/dev/null)
out="${CARGO_TARGET_DIR:-$TARGET}/release/pg_idempotency-pg$major"
[ -f "$out$libdir/pg_idempotency.so" ] || die "cargo pgrx package left no $out$libdir/pg_idempotency.so"
[ -f "$out$extdir/pg_idempotency--$version.sql" ] || die "cargo pgrx package left no install script for $version"

# The package's tree, exactly what dpkg installs: nothing but the files named here.
stage="$TARGET/debian/${name}_${version}_$arch"
rm -rf "$stage" && mkdir -p "$stage/DEBIAN" "$stage$libdir" "$stage$extdir" "$stage/usr/share/doc/$name"
install -m 0644 "$out$libdir/pg_idempotency.so" "$stage$libdir/"
# As Debian's dh_strip does: no debug symbols in the package (the dynamic symbols the
# server looks up stay).
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage$libdir/pg_idempotency.so"
install -m 0644 "$out$extdir"/pg_idempotency.control "$out$extdir"/pg_idempotency--*.sql "$stage$extdir/"
install -m 0644 "$ROOT"/pg_idempotency/sql/released/pg_idempotency--*.sql "$stage$extdir/"
install -m 0644 "$ROOT/LICENSE" "$stage/usr/share/doc/$name/copyright"
deb_changelog "$name" "$version" "$stage/usr/share/doc/$name" "pg_idempotency $version, built from the repository by scripts/package.sh."

# Depends: the server, and the libraries the library links to.
libdeps=$(deb_libdeps "$name" "$stage$libdir/pg_idempotency.so")
[ -n "$libdeps" ] || die "could not work out which libraries the extension needs"

cat > "$stage/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: $DEB_MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: postgresql-$major, $libdeps
Section: database
Priority: optional
Homepage: https://github.com/pg-idempotency/pg_idempotency
Description: idempotency keys inside PostgreSQL $major
 pg_idempotency keeps the memory of retried calls inside PostgreSQL: CREATE
 EXTENSION pg_idempotency gives every service that shares the database atomic
 deduplication from plain SQL (idem_begin, idem_complete), with fenced leases,
 replay of stored results, failure caching and request fingerprints.
 .
 With pg_idempotency in shared_preload_libraries, a background worker purges
 expired records. This package holds the library, the control file, the install
 script and the upgrade scripts from every earlier release.
EOF
deb="$TARGET/debian/${name}_${version}_$arch.deb"
deb_build "$stage" "$deb"
echo "$deb"
