#!/usr/bin/env bash
# The Debian package, tested for real: builds it (scripts/package.sh), installs it with
# `dpkg -i`, starts a private PostgreSQL 15 cluster of its own that preloads the package's
# library, runs a smoke test there (CREATE EXTENSION, a claim, a complete, a replay, the
# purge worker purging, ALTER EXTENSION UPDATE from 0.1.0), removes the package with
# `dpkg --purge` and checks that nothing it installed is left and that dpkg has forgotten it.
#
# The package's files are the ones `cargo pgrx install` (scripts/install-extension.sh pg15)
# writes into Debian's folders. dpkg -i would replace such unowned files without a word,
# and dpkg --purge deletes them, so this script saves the extension's files that are there
# before, moves them out of the way (the test sees the package's files only), and puts them
# back at the end, whatever happened: the folders are left as they were found. Files are
# unlinked and written anew (new inodes), never overwritten in place, so a running server
# that mapped the old library keeps its copy. Another install into the same folders while
# this runs (about 10 s once built) would be undone by the restore.
#
#   scripts/test-package.sh        as root (dpkg), with Debian's PostgreSQL 15
# Each check is a test of the test command's results file when PGIDEM_RESULTS names one.
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/debian.sh"

layer="pg15: Debian package"

if ! pg15_available; then
    deb_record add skip-missing "$layer" "build, dpkg -i, smoke test, dpkg --purge" "$(pg15_missing_reason)"
    log "skipped: $(pg15_missing_reason)"; exit 0
fi
if ! is_root; then
    reason="installing a Debian package needs root (scripts/test.sh as root)"
    deb_record add skip-missing "$layer" "build, dpkg -i, smoke test, dpkg --purge" "$reason"
    log "skipped: $reason"; exit 0
fi

work="$TARGET/package-test"
cluster="$work/cluster"
saved="$work/saved"
bin=$("$PG15_PG_CONFIG" --bindir)
rm -rf "$work" && mkdir -p "$work" "$saved"

# --- the package ------------------------------------------------------------------------

build() {
    "$ROOT/scripts/package.sh" "$PG15_PG_CONFIG" > "$work/deb-path"
    local deb
    deb=$(tail -n1 "$work/deb-path")
    [ -f "$deb" ] || { echo "scripts/package.sh named no .deb"; return 1; }
    dpkg-deb --info "$deb"
}
deb_check "build (scripts/package.sh)" build
deb=$(tail -n1 "$work/deb-path")

# Debian's own checks of a package: errors and warnings fail (the informational notes
# left are Rust's missing _FORTIFY_SOURCE and Debian's lib/postgresql/NN/lib layout).
lint() { lintian --fail-on error,warning "$deb"; }
if command -v lintian >/dev/null; then
    deb_check "lintian: no errors, no warnings" lint
else
    deb_record add skip-missing "$layer" "lintian: no errors, no warnings" "lintian is not installed (setup installs it as root: apt-get install lintian)"
fi
pkg=$(dpkg-deb --field "$deb" Package)
version=$(dpkg-deb --field "$deb" Version)
# The regular files the package installs, as absolute paths.
dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./|/|; /[^/]$/p' > "$work/files"

installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^[ihr]'; }
not_installed_yet() {
    ! installed || { echo "$pkg is installed on this machine already: this test would remove it (dpkg --purge $pkg first)"; return 1; }
}
deb_check "not installed before the test" not_installed_yet

# The extension's files in Debian's folders now (scripts/install-extension.sh's, if any):
# saved, then moved out of the way, so that the cluster below can only find the package's
# own files (a stale file left there, say an old release's script, would hide one the
# package lacks). They are put back at the end.
libdir=$("$PG15_PG_CONFIG" --pkglibdir)
extdir="$("$PG15_PG_CONFIG" --sharedir)/extension"
present() { find "$libdir" "$extdir" -maxdepth 1 -type f -name 'pg_idempotency*' | sort; }
present > "$work/before"
while read -r f; do
    mkdir -p "$saved$(dirname "$f")" && cp -a "$f" "$saved$f"
done < "$work/before"
restored=no
restore() {
    [ "$restored" = no ] || return 0
    restored=yes
    local f
    while read -r f; do
        # A new file renamed into place: a server that mapped the old one keeps it.
        cp -a "$saved$f" "$f.pkgtest-restore" && mv -f "$f.pkgtest-restore" "$f"
    done < "$work/before"
}
stop_cluster() {
    if [ -f "$cluster/data/postmaster.pid" ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$cluster/data" -m fast -w stop >/dev/null
    fi
}
cleanup() {
    stop_cluster || true
    if installed; then dpkg --purge "$pkg" >/dev/null || true; fi
    restore
}
trap cleanup EXIT
# Unlinked, not overwritten: a running server keeps the library it mapped.
xargs -r rm -f < "$work/before"

install_package() {
    dpkg -i "$deb"
    deb_expect "dpkg's status of $pkg" "ii $version" "$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$pkg" | tr -s ' ')"
    # Every file on disk is the package's own (dpkg --verify prints a line per changed file).
    local changed
    changed=$(dpkg --verify "$pkg")
    deb_expect "files that differ from the package (dpkg --verify)" "" "$changed"
    deb_expect "the extension's files in $libdir and $extdir" \
        "$(grep -E "^($libdir|$extdir)/pg_idempotency[^/]*$" "$work/files" | sort)" "$(present)"
    deb_expect "files dpkg lists for $pkg" "$(sort "$work/files")" "$(dpkg -L "$pkg" | while read -r f; do if [ -f "$f" ]; then echo "$f"; fi; done | sort)"
}
deb_check "dpkg -i" install_package

# --- a private cluster that loads the package's library ---------------------------------

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
psql_in() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 "host=$cluster port=$port user=postgres dbname=$1" -c "$2"; }

start_cluster() {
    mkdir -p "$cluster" && chown postgres: "$cluster"
    runuser -u postgres -- "$bin/initdb" -D "$cluster/data" -U postgres --auth=trust -E UTF8 --no-locale >/dev/null
    # A socket in its own folder only (the port just names the socket file); the worker
    # purges the database "postgres", which exists from the start, every second.
    cat <<EOF | runuser -u postgres -- tee -a "$cluster/data/postgresql.conf" >/dev/null
port = $port
listen_addresses = ''
unix_socket_directories = '$cluster'
shared_preload_libraries = 'pg_idempotency'
pg_idempotency.database = 'postgres'
pg_idempotency.purge_interval = 1
EOF
    runuser -u postgres -- "$bin/pg_ctl" -D "$cluster/data" -l "$cluster/server.log" -w -t 60 start >/dev/null \
        || { tail -n 20 "$cluster/server.log"; return 1; }
    # The postmaster mapped the package's file (by inode), not a copy from elsewhere.
    local lib pid
    lib="$("$PG15_PG_CONFIG" --pkglibdir)/pg_idempotency.so"
    pid=$(head -n1 "$cluster/data/postmaster.pid")
    deb_expect "inode of $lib mapped by the postmaster" "$(stat -c %i "$lib")" \
        "$(awk -v lib="$lib" '$6 == lib { print $5; exit }' "/proc/$pid/maps")"
}
deb_check "a private cluster preloading the package's library starts" start_cluster

create_extension() {
    psql_in postgres "CREATE EXTENSION pg_idempotency"
    deb_expect "installed version" "$version" "$(psql_in postgres "SELECT extversion FROM pg_extension WHERE extname = 'pg_idempotency'")"
}
deb_check "CREATE EXTENSION pg_idempotency" create_extension

claim_complete_replay() {
    local claim fence
    claim=$(psql_in postgres "SELECT outcome || ' ' || fence FROM idem_begin('package_smoke', 'call-1', '{\"to\": \"ann@example.com\"}')")
    deb_expect "first begin" "claimed" "${claim% *}"
    fence=${claim#* }
    deb_expect "complete" "succeeded" \
        "$(psql_in postgres "SELECT state FROM idem_complete('package_smoke', 'call-1', $fence, '{\"email_id\": 7}')")"
    deb_expect "repeat" 'replay|t|{"email_id": 7}' \
        "$(psql_in postgres "SELECT outcome, succeeded, response FROM idem_begin('package_smoke', 'call-1', '{\"to\": \"ann@example.com\"}')")"
    deb_expect "canonical JSON" '{"a":2,"b":[1,true]}' "$(psql_in postgres "SELECT idem_canonical('{\"b\": [1, true], \"a\": 2}')")"
}
deb_check "a claim, a complete, a replay" claim_complete_replay

# poll <seconds> <what> <wanted> <query>: until the query answers what is wanted; the worker
# runs on its own clock, so this waits for what it did, bounded.
poll() {
    local deadline=$((SECONDS + $1)) got
    while :; do
        got=$(psql_in postgres "$4")
        [ "$got" = "$3" ] && return 0
        [ $SECONDS -lt $deadline ] || { echo "$2: wanted '$3', still '$got' after $1 s"; return 1; }
        sleep 0.2
    done
}
purge_worker() {
    poll 30 "purge worker running on database postgres" 1 \
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idempotency purger' AND datname = 'postgres'"
    # A result remembered for one second: once it expires the worker deletes its row.
    local fence
    fence=$(psql_in postgres "SELECT fence FROM idem_begin('package_expiry', 'call-1', ttl => '1 second')")
    psql_in postgres "SELECT state FROM idem_complete('package_expiry', 'call-1', $fence, '{}')" >/dev/null
    deb_expect "rows before the purge" 1 "$(psql_in postgres "SELECT count(*) FROM idempotency.records WHERE scope = 'package_expiry'")"
    poll 30 "rows left after the worker's purge" 0 "SELECT count(*) FROM idempotency.records WHERE scope = 'package_expiry'"
}
deb_check "the purge worker (preloaded) purges an expired record" purge_worker

update_from_0_1_0() {
    psql_in postgres "CREATE DATABASE package_update"
    psql_in package_update "CREATE EXTENSION pg_idempotency VERSION '0.1.0'"
    deb_expect "version created" 0.1.0 "$(psql_in package_update "SELECT extversion FROM pg_extension WHERE extname = 'pg_idempotency'")"
    psql_in package_update "ALTER EXTENSION pg_idempotency UPDATE"
    deb_expect "version after the update" "$version" "$(psql_in package_update "SELECT extversion FROM pg_extension WHERE extname = 'pg_idempotency'")"
    deb_expect "a claim after the update" claimed "$(psql_in package_update "SELECT outcome FROM idem_begin('package_update', 'call-1')")"
}
deb_check "CREATE EXTENSION VERSION '0.1.0', then ALTER EXTENSION UPDATE" update_from_0_1_0

deb_check "the private cluster stops" stop_cluster

# --- removal ----------------------------------------------------------------------------

remove_package() {
    dpkg --purge "$pkg"
    if dpkg-query -W -f='${db:Status-Abbrev}\n' "$pkg" 2>/dev/null | grep -q .; then
        echo "dpkg still lists $pkg: $(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$pkg")"; return 1
    fi
    [ ! -e "/var/lib/dpkg/info/$pkg.list" ] || { echo "dpkg still keeps /var/lib/dpkg/info/$pkg.list"; return 1; }
    local left
    left=$(while read -r f; do if [ -e "$f" ]; then echo "$f"; fi; done < "$work/files")
    deb_expect "files of the package left behind" "" "$left"
    [ ! -e "/usr/share/doc/$pkg" ] || { echo "/usr/share/doc/$pkg is left behind"; return 1; }
}
deb_check "dpkg --purge leaves none of its files, and dpkg forgets it" remove_package

as_found() {
    restore
    deb_expect "the extension's files in $libdir and $extdir" "$(cat "$work/before")" "$(present)"
    local f
    while read -r f; do
        cmp "$saved$f" "$f" || { echo "$f differs from before the test"; return 1; }
        echo "as before: $f"
    done < "$work/before"
}
deb_check "the folders are left as they were found" as_found

trap - EXIT
rm -rf "$cluster"
log "$layer: every check passed"
