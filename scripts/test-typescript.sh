#!/usr/bin/env bash
# The TypeScript package pg-idempotency (typescript/): built as a user gets it and tested
# against a real database.
#
#   scripts/test-typescript.sh checks
#       npm ci (the pinned lockfile); ESLint; tsc --strict over the sources and the tests;
#       the build (dist/); npm pack; the packed tarball installed into a fresh project
#       (target/typescript/consumer) with node-postgres and TypeScript, imported there from
#       an ES module and from a CommonJS script (require), and its types checked by tsc
#       there, from an ES module and a CommonJS one (without @types/pg: the package's types
#       must not need it); the agent frameworks' adapters (pg-idempotency/ai,
#       /openai-agents, /mcp) imported and type-checked there without any framework
#       installed.
#   scripts/test-typescript.sh <pg18|pg15> <extension|portable>
#       the package's tests (typescript/test/, node --test) against a fresh database with
#       that backend on the running private cluster.
#
# PGIDEM_RESULTS=<file>  append one line per test (scripts/results.py, from JUnit XML)
# PGIDEM_TYPESCRIPT_DB=<name>  the database to make afresh (default pgidem_typescript)
#
# Without Node.js 20.19 or later (and npm) the whole layer is skipped, with that reason.
# Exits non-zero when a check or a test failed.
set -euo pipefail
source "$(dirname "$0")/env.sh"

usage="usage: $0 checks | <pg18|pg15> <extension|portable>"
mode="${1:?$usage}"
ts="$ROOT/typescript"
out="$TARGET/typescript"
consumer="$out/consumer"
mkdir -p "$out"

# The versions a user's project is checked with (the package's own pins).
CONSUMER_PINS=(pg@8.23.1 typescript@5.9.3 @types/node@20.19.43)

record_skip() { # <layer> <reason>
    log "$1: skipped: $2"
    if [ -n "${PGIDEM_RESULTS:-}" ]; then
        python3 "$ROOT/scripts/results.py" add skip-missing "$1" "all tests" "$2"
    fi
}

record() { # <xml> <layer>
    [ -n "${PGIDEM_RESULTS:-}" ] || return 0
    if [ -s "$1" ]; then
        python3 "$ROOT/scripts/results.py" junit "$1" "$2"
    else
        python3 "$ROOT/scripts/results.py" add fail "$2" "all tests" "no JUnit report"
    fi
}

node_ok() {
    command -v node >/dev/null && command -v npm >/dev/null &&
        node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'
}

if ! node_ok; then
    record_skip "TypeScript package" "Node.js 20.19 or later with npm is not installed (found: $(node -v 2>/dev/null || echo none))"
    exit 0
fi

npm_quiet() { npm --no-audit --no-fund --loglevel=error "$@"; }

# node_modules as the lockfile says: npm ci once per lockfile (and per test command,
# PGIDEM_RUN_ID), under a lock (the two PostgreSQL versions' lanes arrive together).
ensure_modules() {
    ( flock 9
      local stamp="$out/.modules.sha256" want
      want=$( { echo "${PGIDEM_RUN_ID:-}"; node -v; sha256sum "$ts/package-lock.json"; } | sha256sum)
      if [ -d "$ts/node_modules" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi
      log "typescript: npm ci"
      rm -f "$stamp"
      (cd "$ts" && npm_quiet ci)
      echo "$want" > "$stamp"
    ) 9> "$out/.modules.lock"
}

# The tests compiled (build/), once per change of the sources and tests.
ensure_tests_built() {
    ( flock 9
      local stamp="$out/.tests.sha256" want
      want=$( { cat "$out/.modules.sha256"; find "$ts/src" "$ts/test" "$ts"/tsconfig*.json -type f -print0 |
                sort -z | xargs -0 sha256sum; } | sha256sum)
      if [ -d "$ts/build/test" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi
      log "typescript: the tests compiled (build/)"
      rm -f "$stamp"
      (cd "$ts" && rm -rf build && npx --no-install tsc -p tsconfig.test.json)
      echo "$want" > "$stamp"
    ) 9> "$out/.tests.lock"
}

# A fresh project that installs the packed tarball, as a user's would.
consumer_project() { # <tarball>
    local tarball="$1"
    rm -rf "$consumer" && mkdir -p "$consumer"
    cat > "$consumer/package.json" <<'EOF'
{ "name": "pg-idempotency-consumer", "version": "0.0.0", "private": true, "type": "module" }
EOF
    (cd "$consumer" && npm_quiet install --prefer-offline "$tarball" "${CONSUMER_PINS[@]}")
    cat > "$consumer/esm.mjs" <<'EOF'
import assert from "node:assert/strict";
import { configure, idempotent, InvalidArgument, NOT_FOUND, Store, VERSION } from "pg-idempotency";

assert.equal(VERSION, "0.9.0");
assert.equal(typeof NOT_FOUND, "symbol");
const send = idempotent(async function sendEmail(input) { return input.to; }, { ttl: 60_000 });
assert.equal(send.name, "sendEmail");
assert.throws(() => idempotent(async () => 1), InvalidArgument);
assert.throws(() => new Store(42), InvalidArgument);
configure("postgresql://nobody@127.0.0.1:1/none");
// The adapters' subpaths load without their frameworks installed (none is, here).
const ai = await import("pg-idempotency/ai");
const agents = await import("pg-idempotency/openai-agents");
const mcp = await import("pg-idempotency/mcp");
const tool = ai.idempotentTool({ description: "d", execute: async (input) => input }, { name: "send_email", runId: "r" });
assert.equal(typeof tool.execute, "function");
assert.equal(agents.idempotentTool({ execute: async function sendEmail() { return 1; } }).name, "sendEmail");
assert.deepEqual(mcp.KEY_META, ["pg-idempotency/key", "idempotencyKey"]);
assert.throws(() => mcp.idempotentHandler("a:b", async () => ({ content: [] })), InvalidArgument);
console.log("esm: ok");
EOF
    cat > "$consumer/cjs.cjs" <<'EOF'
const assert = require("node:assert/strict");
const { idempotent, IdempotencyError, InvalidArgument, Store } = require("pg-idempotency");

assert.ok(new InvalidArgument("x") instanceof IdempotencyError);
assert.equal(new InvalidArgument("x").sqlstate, "22023");
assert.equal(typeof idempotent.method, "function");
assert.ok(new Store("postgresql://nobody@127.0.0.1:1/none"));
assert.equal(typeof require("pg-idempotency/mcp").idempotentHandler, "function");
console.log("cjs: ok");
EOF
    cat > "$consumer/types.ts" <<'EOF'
import { currentCall, idempotent, NOT_FOUND, Store, ToolFailed } from "pg-idempotency";
import type { Begin, CallContext, IdempotentOptions, Reconcile } from "pg-idempotency";

const store = new Store("postgresql://app@localhost/app", { schema: "public" });

export const sendEmail = idempotent(
  async function sendEmail(input: { to: string; subject: string }): Promise<{ id: number }> {
    const call: CallContext = currentCall();
    return { id: call.attempt };
  },
  {
    store,
    ttl: 86_400_000,
    key: (input) => input.to,
    onUnknownOutcome: (call: Reconcile<{ to: string; subject: string }>) => (call.attempt > 1 ? NOT_FOUND : { id: 0 }),
  },
);
const result: Promise<{ id: number }> = sendEmail({ to: "ann", subject: "Hi" });

// @ts-expect-error the key function reads the input's own members
idempotent(async (input: { to: string }) => input.to, { scope: "s", key: (input) => input.nope });
// @ts-expect-error durations are numbers (milliseconds)
const bad: IdempotentOptions = { ttl: "1 day" };

class Mailer {
  @idempotent.method<{ to: string }>({ store, key: (input) => input.to })
  async send(input: { to: string }): Promise<string> {
    return input.to;
  }
}

async function replay(): Promise<Begin> {
  return store.begin("send_email", "k", { to: "ann" }, { ttl: 60_000, onCacheHit: "returnCachedIfSuccess" });
}
export { bad, Mailer, replay, result, ToolFailed };

// The adapters' declarations need none of the frameworks' (none is installed here).
import { idempotentTool as aiTool } from "pg-idempotency/ai";
import { idempotentTool as agentTool } from "pg-idempotency/openai-agents";
import { idempotentHandler } from "pg-idempotency/mcp";

export const mailTool = aiTool(
  { execute: async (input: { to: string }, _options: { toolCallId: string; context: { runId: string } }) => input.to },
  { name: "send_email", runId: ({ context }) => context.runId, ttl: 86_400_000 },
);
export const agentOptions = agentTool({ name: "send_email", parameters: {}, execute: async (_input: unknown) => "sent" }, { store });
export const handler = idempotentHandler("send_email", async (args: { to: string }) => ({ content: [{ type: "text", text: args.to }] }));
EOF
    # CommonJS TypeScript: require() of the ES module, typed (TypeScript 5.8 and later).
    cat > "$consumer/types-cjs.cts" <<'EOF'
import pgi = require("pg-idempotency");

const sendEmail = pgi.idempotent(async function sendEmail(input: { to: string }) {
  return { to: input.to };
}, { key: (input) => input.to, ttl: 60_000 });
export const result: Promise<{ to: string }> = sendEmail({ to: "ann" });
export const error: pgi.IdempotencyError = new pgi.InvalidArgument("x");
EOF
    cat > "$consumer/tsconfig.json" <<'EOF'
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "strict": true,
    "exactOptionalPropertyTypes": true,
    "noUncheckedIndexedAccess": true,
    "skipLibCheck": false,
    "noEmit": true,
    "types": ["node"]
  },
  "files": ["types.ts", "types-cjs.cts"]
}
EOF
}

checks() {
    local status=0 layer="TypeScript package: checks" step
    ensure_modules
    for step in "ESLint:npx --no-install eslint ." \
                "tsc --strict:npx --no-install tsc -p tsconfig.test.json --noEmit" \
                "build:npm run --silent build"; do
        log "typescript: ${step%%:*}"
        (cd "$ts" && eval "${step#*:}") || { status=1; log "typescript: ${step%%:*} failed"; }
    done
    local tarball=""
    if [ $status -eq 0 ]; then
        log "typescript: npm pack"
        rm -f "$out"/pg-idempotency-*.tgz
        tarball="$out/$(cd "$ts" && npm pack --silent --pack-destination "$out" | tail -n 1)"
        [ -s "$tarball" ] || { status=1; log "typescript: npm pack made no tarball"; }
    fi
    if [ $status -eq 0 ]; then
        # Only dist/, the README, the license and package.json: no sources, tests or maps of them.
        if tar -tzf "$tarball" | grep -Ev '^package/(dist/.*|README\.md|LICENSE|package\.json)$'; then
            status=1; log "typescript: the tarball holds files it should not (above)"
        fi
        log "typescript: the tarball installed into a fresh project ($consumer)"
        consumer_project "$tarball" || status=1
        (cd "$consumer" && node esm.mjs && node cjs.cjs) || status=1
        (cd "$consumer" && npx --no-install tsc -p tsconfig.json) || status=1
    fi
    if [ -n "${PGIDEM_RESULTS:-}" ]; then
        python3 "$ROOT/scripts/results.py" add "$([ $status -eq 0 ] && echo pass || echo fail)" \
            "$layer" "ESLint, tsc --strict, the build, npm pack, the tarball installed and imported from ESM and CommonJS, its types checked"
    fi
    return $status
}

suite() {
    local version="$1" backend="$2" db="${PGIDEM_TYPESCRIPT_DB:-pgidem_typescript}" status=0
    local layer="$version ($backend): TypeScript package"
    ensure_modules
    ensure_tests_built
    PGOPTIONS="-c client_min_messages=warning" fresh_database "$version" "$db" "$backend"
    # node-postgres takes URLs; the private clusters listen on 127.0.0.1 (scripts/cluster.sh).
    local dsn="postgresql://postgres@127.0.0.1:$(port_of "$version")/$db"
    local xml="$out/$version-$backend.xml"
    rm -f "$xml"
    log "$layer"
    (cd "$ts" && PGIDEM_DSN="$dsn" PGIDEM_BACKEND="$backend" node --test --test-timeout=120000 \
        --test-reporter=spec --test-reporter-destination=stdout \
        --test-reporter=junit --test-reporter-destination="$xml" build/test/*/*.test.js) || status=1
    record "$xml" "$layer"
    return $status
}

case "$mode" in
    checks) checks ;;
    pg18|pg15) suite "$mode" "${2:?$usage}" ;;
    *) die "$usage" ;;
esac
