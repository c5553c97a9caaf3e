#!/usr/bin/env bash
# The MCP proxy's Debian package, tested for real: builds it (scripts/package-mcp.sh),
# checks it with lintian, installs it with `dpkg -i`, makes a deduplicated call through
# the installed /usr/bin/pg-idempotency-mcp over stdio (the counting server behind it, the
# private PostgreSQL 18 cluster's records: a call, its repeat replayed, one effect, the
# record succeeded once the host has closed the proxy), removes it with `dpkg --purge` and
# checks that nothing it installed is left.
#
#   scripts/test-package-mcp.sh [--binary PATH]   as root (dpkg); the pg18 cluster running,
#                                                 the MCP parts installed (scripts/mcp-parts.sh)
# --binary: package a binary built already (the test command's debug build), not a release
# build. Each check is a test of the test command's results file when PGIDEM_RESULTS names one.
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/debian.sh"

layer="pg18: the MCP proxy's Debian package"
what="build, lintian, dpkg -i, a call through it, dpkg --purge"
if ! is_root; then
    reason="installing a Debian package needs root (scripts/test.sh as root)"
    deb_record add skip-missing "$layer" "$what" "$reason"; log "skipped: $reason"; exit 0
fi
python="$TARGET/mcp-venv/bin/python"
if [ ! -x "$python" ]; then
    reason="the MCP parts are not installed (scripts/mcp-parts.sh)"
    deb_record add skip-missing "$layer" "$what" "$reason"; log "skipped: $reason"; exit 0
fi

work="$TARGET/package-mcp-test"
rm -rf "$work" && mkdir -p "$work"


build() {
    "$ROOT/scripts/package-mcp.sh" "$@" > "$work/deb-path"
    local deb
    deb=$(tail -n1 "$work/deb-path")
    [ -f "$deb" ] || { echo "scripts/package-mcp.sh named no .deb"; return 1; }
    dpkg-deb --info "$deb"
}
deb_check "build (scripts/package-mcp.sh)" build "$@"
deb=$(tail -n1 "$work/deb-path")

if command -v lintian >/dev/null; then
    deb_check "lintian: no errors, no warnings" lintian --fail-on error,warning "$deb"
else
    deb_record add skip-missing "$layer" "lintian: no errors, no warnings" "lintian is not installed (setup installs it as root: apt-get install lintian)"
fi
pkg=$(dpkg-deb --field "$deb" Package)
version=$(dpkg-deb --field "$deb" Version)
dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -n 's|^\./|/|; /[^/]$/p' > "$work/files"

installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^[ihr]'; }
not_installed_yet() {
    ! installed || { echo "$pkg is installed on this machine already: this test would remove it (dpkg --purge $pkg first)"; return 1; }
}
deb_check "not installed before the test" not_installed_yet
trap 'if installed; then dpkg --purge "$pkg" >/dev/null || true; fi' EXIT

install_package() {
    dpkg -i "$deb"
    deb_expect "dpkg's status of $pkg" "ii $version" "$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$pkg" | tr -s ' ')"
    deb_expect "files that differ from the package (dpkg --verify)" "" "$(dpkg --verify "$pkg")"
    deb_expect "the installed binary's version" "pg-idempotency-mcp $version" "$(/usr/bin/pg-idempotency-mcp --version)"
}
deb_check "dpkg -i" install_package

# A host's session through the installed binary: initialize, a call, its repeat; then the
# host closes stdin, and the proxy exits having recorded the call.
db=pgidem_mcp_package
call_through_it() {
    fresh_database pg18 "$db" extension >/dev/null
    local effects="$work/effects.jsonl" config="$work/proxy.toml"
    cat > "$config" <<EOF
[database]
url = "$(conninfo pg18) dbname=$db"
pool_size = 2

[upstream]
name = "mail"
command = "$python"
args = ["$ROOT/tests/mcp-parts/counting_server.py"]
EOF
    local out
    out=$(COUNTING_LOG="$effects" python3 - /usr/bin/pg-idempotency-mcp "$config" <<'EOF'
import json, subprocess, sys
proxy = subprocess.Popen([sys.argv[1], "--config", sys.argv[2]], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
def send(message):
    proxy.stdin.write(json.dumps(message) + "\n")
    proxy.stdin.flush()
def answer(id):
    for line in proxy.stdout:
        message = json.loads(line)
        if message.get("id") == id:
            return message
    raise SystemExit(f"the proxy closed stdout before answering {id}")
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "package-test", "version": "1"}}})
answer(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
call = {"name": "send_email", "arguments": {"to": "ann@example.com", "subject": "package"},
        "_meta": {"pg-idempotency/key": "package-1"}}
marks = []
for id in (2, 3):
    send({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call})
    result = answer(id)["result"]
    marks.append(result["_meta"]["pg-idempotency/call"])
    print(f"call {id}: {json.dumps(marks[-1])}")
proxy.stdin.close()
status = proxy.wait(timeout=60)
if [m["replayed"] for m in marks] != [False, True]:
    raise SystemExit(f"wanted a run, then a replay: {marks}")
if status != 0:
    raise SystemExit(f"the proxy exited with {status}")
print(marks[0]["scope"])
EOF
    )
    echo "$out"
    local effects_count scope state
    scope=$(tail -n1 <<< "$out")
    effects_count=$(grep -c '"send_email"' "$effects" || true)
    deb_expect "effects of the call and its repeat" 1 "$effects_count"
    state=$("$(bindir_of pg18)/psql" -X -At "$(conninfo pg18) dbname=$db" \
        -v scope="$scope" <<< "SELECT state FROM idem_lookup(:'scope', 'package-1')")
    deb_expect "the record once the proxy exited" succeeded "$state"
}
deb_check "a call and its repeat through /usr/bin/pg-idempotency-mcp: one effect, the record succeeded" call_through_it

remove_package() {
    dpkg --purge "$pkg"
    if dpkg-query -W -f='${db:Status-Abbrev}\n' "$pkg" 2>/dev/null | grep -q .; then
        echo "dpkg still lists $pkg"; return 1
    fi
    local left
    left=$(while read -r f; do if [ -e "$f" ]; then echo "$f"; fi; done < "$work/files")
    deb_expect "files of the package left behind" "" "$left"
    [ ! -e "/usr/share/doc/$pkg" ] || { echo "/usr/share/doc/$pkg is left behind"; return 1; }
}
deb_check "dpkg --purge leaves none of its files, and dpkg forgets it" remove_package
trap - EXIT
log "$layer: every check passed"
