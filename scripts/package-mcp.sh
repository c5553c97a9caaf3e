#!/usr/bin/env bash
# Builds the Debian package of the MCP proxy:
#   target/debian/pg-idempotency-mcp_<version>_<arch>.deb
# holding /usr/bin/pg-idempotency-mcp (stripped), an example configuration and the
# licence. It needs the database's SQL API (the extension or the portable variant), not
# PostgreSQL itself: the proxy may run on another machine than the database.
# Needs no root (dpkg-deb --root-owner-group makes the files root's in the package).
#
#   scripts/package-mcp.sh                  the release build (cargo build --release)
#   scripts/package-mcp.sh --binary PATH    a binary built already (the test command
#                                           packages its debug build: the same package
#                                           but for the binary's speed)
# Prints the path of the .deb on its last line.
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/debian.sh"

binary=""
if [ "${1:-}" = --binary ]; then binary="${2:?--binary needs a path}"; fi
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing: the Debian package is built on Debian"

name="pg-idempotency-mcp"
version=$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "pg_idempotency_mcp"))')
arch=$(dpkg --print-architecture)
if [ -z "$binary" ]; then
    log "building $name $version (cargo build --release)"
    (cd "$ROOT" && cargo build --quiet --release -p pg_idempotency_mcp --bin "$name")
    binary="${CARGO_TARGET_DIR:-$TARGET}/release/$name"
fi
[ -x "$binary" ] || die "no proxy binary at $binary"

# The package's tree, exactly what dpkg installs.
stage="$TARGET/debian/${name}_${version}_$arch"
doc="$stage/usr/share/doc/$name"
rm -rf "$stage" && mkdir -p "$stage/DEBIAN" "$stage/usr/bin" "$doc/examples" "$stage/usr/share/lintian/overrides"
install -m 0755 "$binary" "$stage/usr/bin/$name"
# As Debian's dh_strip does: no debug symbols in the package.
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage/usr/bin/$name"
install -m 0644 "$ROOT/LICENSE" "$doc/copyright"
install -m 0644 "$ROOT/mcp/examples/proxy.toml" "$doc/examples/proxy.toml"
# The reference is docs/mcp.md and `pg-idempotency-mcp --help`; there is no manual page.
printf '%s: no-manual-page [usr/bin/%s]\n' "$name" "$name" > "$stage/usr/share/lintian/overrides/$name"
chmod 0644 "$stage/usr/share/lintian/overrides/$name"
deb_changelog "$name" "$version" "$doc" "pg-idempotency-mcp $version, built by scripts/package-mcp.sh."

# Depends: the libraries the binary links to; not PostgreSQL.
libdeps=$(deb_libdeps "$name" "$stage/usr/bin/$name")
[ -n "$libdeps" ] || die "could not work out which libraries the proxy needs"

cat > "$stage/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: $DEB_MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $libdeps
Section: net
Priority: optional
Homepage: https://github.com/pg-idempotency/pg_idempotency
Description: MCP proxy that makes tool calls safe to retry
 pg-idempotency-mcp sits in front of any MCP server, over stdio or Streamable
 HTTP, and deduplicates its side-effecting tools/call in PostgreSQL with
 pg_idempotency: a retried call (a lost reply, a model re-running a tool) gets
 the first call's result instead of a second effect.
 .
 The database needs pg_idempotency's SQL API: the extension
 (postgresql-NN-pg-idempotency) or the portable SQL variant.
EOF
deb="$TARGET/debian/${name}_${version}_$arch.deb"
deb_build "$stage" "$deb"
echo "$deb"
