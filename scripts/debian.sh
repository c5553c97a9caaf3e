# Sourced by the Debian package scripts (package.sh, package-mcp.sh) and their tests
# (test-package.sh, test-package-mcp.sh): what building and checking a .deb takes, said once.

DEB_MAINTAINER="${DEB_MAINTAINER:-pg_idempotency contributors <pg-idempotency@users.noreply.github.com>}"
# Dated by the last commit, as are the archive's timestamps (dpkg-deb reads
# SOURCE_DATE_EPOCH), so the same commit gives the same package.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}"

# deb_changelog <package> <version> <doc dir> <what>: Debian wants a changelog in every
# package (lintian: no-changelog); <what> is its one entry, a short line.
deb_changelog() {
    cat <<EOF | gzip -9n > "$3/changelog.gz"
$1 ($2) unstable; urgency=medium

  * $4

 -- $DEB_MAINTAINER  $(date -R -u -d "@$SOURCE_DATE_EPOCH")
EOF
    chmod 0644 "$3/changelog.gz"
}

# deb_libdeps <package> <binary>: the libraries <binary> links to with the versions its
# symbols need, as dpkg-shlibdeps works them out from the installed packages' shlibs files
# (normally libc6 and libgcc-s1: Rust unwinds through libgcc_s). Without dpkg-dev: libc6
# at the newest GLIBC_ symbol version the binary asks for.
deb_libdeps() {
    if command -v dpkg-shlibdeps >/dev/null; then
        local dir
        dir=$(mktemp -d)
        mkdir -p "$dir/debian"
        # dpkg-shlibdeps reads the source package's control file; a minimal one does.
        printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$1" "$1" > "$dir/debian/control"
        (cd "$dir" && dpkg-shlibdeps -O "$2" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
        rm -rf "$dir"
    else
        local glibc
        glibc=$(objdump -T "$2" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
        echo "libc6 (>= $glibc), libgcc-s1"
    fi
}

# deb_build <stage> <deb>: md5sums, modes, and the archive, its files root's.
deb_build() {
    (cd "$1" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$1/DEBIAN/md5sums"
    chmod 0644 "$1/DEBIAN/control" "$1/DEBIAN/md5sums"
    find "$1" -type d -exec chmod 0755 {} +
    dpkg-deb --root-owner-group -Zxz --build "$1" "$2" >/dev/null
    log "built $2 ($(du -h "$2" | cut -f1))"
}

# For the tests: `layer` (the results' layer name) and `work` (a scratch folder) set first.
deb_record() { if [ -n "${PGIDEM_RESULTS:-}" ]; then python3 "$ROOT/scripts/results.py" "$@"; fi; }

# deb_check <name> <command...>: one test. Its output goes to the log; a failure records the
# output's last lines as the reason and ends the script (the caller's EXIT trap cleans up).
# It runs in a subshell with -e: called from an `if` or `||`, bash would ignore -e in the
# check's function, and a failed comparison before its last line would pass unseen.
deb_check() {
    local name="$1" rc; shift
    log "$layer: $name"
    set +e
    (set -e; "$@") > "$work/check.out" 2>&1
    rc=$?
    set -e
    cat "$work/check.out"
    if [ $rc -eq 0 ]; then
        deb_record add pass "$layer" "$name"
    else
        deb_record add fail "$layer" "$name" "$(tail -n 8 "$work/check.out" | tr '\n' '|')"
        exit 1
    fi
}

# deb_expect <what> <wanted> <got>: a failed comparison says both.
deb_expect() {
    if [ "$2" != "$3" ]; then echo "$1: wanted '$2', got '$3'" >&2; return 1; fi
}
