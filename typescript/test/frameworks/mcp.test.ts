/**
 * An MCP server written with the official TypeScript SDK whose tool handler is
 * idempotent, called by the SDK's own Client more than once: over its in-memory transport,
 * across a reconnect to a new server, and over stdio to a server process restarted between
 * the calls. One email per key.
 *
 * The key: the request's `_meta` key (an agent puts agentKey(runId, tool, args) there),
 * else the arguments' digest; the JSON-RPC id, which a retry changes, never.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";

import { agentKey, InvalidArgument } from "../../src/index.js";
import { idempotentHandler } from "../../src/integrations/mcp.js";
import { DSN, dbTest, Effects, fileStore, scopeFor, sql } from "../support/db.js";

const store = fileStore();
const ARGS = { to: "ann@example.com", subject: "Your order été #42" };
const REORDERED = { subject: ARGS.subject, to: ARGS.to };

function mailServer(outbox: Effects, scope: string): McpServer {
  const server = new McpServer({ name: "mail", version: "1.0.0" });
  server.registerTool(
    "send_email",
    { description: "Send an email.", inputSchema: { to: z.string(), subject: z.string() } },
    idempotentHandler(
      "send_email",
      async ({ to, subject }) => {
        const sent = { messageId: `m-${outbox.add([to, subject])}`, to };
        return { content: [{ type: "text" as const, text: JSON.stringify(sent) }], structuredContent: sent };
      },
      { store, scope },
    ),
  );
  return server;
}

/** A client connected to `server` over the SDK's in-memory transport. */
async function connected(server: McpServer): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(clientSide);
  return client;
}

async function structured(client: Client, args: object, meta?: Record<string, unknown>): Promise<unknown> {
  const result = await client.callTool({ name: "send_email", arguments: args as Record<string, unknown>, ...(meta ? { _meta: meta } : {}) });
  assert.ok(result.isError !== true, JSON.stringify(result));
  return result.structuredContent;
}

dbTest("a retried call (a new request, the arguments in another order) sends one email", async () => {
  const outbox = new Effects();
  const client = await connected(mailServer(outbox, scopeFor("mcp-retry")));
  const first = await structured(client, ARGS);
  const again = await structured(client, REORDERED);
  await client.close();
  assert.deepEqual(outbox.runs, [[ARGS.to, ARGS.subject]]);
  assert.deepEqual(first, { messageId: "m-1", to: ARGS.to });
  assert.deepEqual(again, first);
});

dbTest("a run-keyed call replays across a reconnect to a new server; another run sends its own", async () => {
  const outbox = new Effects();
  const scope = scopeFor("mcp-run");
  const meta = { idempotencyKey: agentKey(randomUUID(), "send_email", ARGS) };
  let client = await connected(mailServer(outbox, scope));
  const first = await structured(client, ARGS, meta);
  await client.close();
  // The agent's process and the server restarted: a new connection, a new server.
  client = await connected(mailServer(outbox, scope));
  const again = await structured(client, ARGS, meta);
  const other = await structured(client, ARGS, { "pg-idempotency/key": agentKey(randomUUID(), "send_email", ARGS) });
  await client.close();
  assert.deepEqual(first, { messageId: "m-1", to: ARGS.to });
  assert.deepEqual(again, first);
  assert.deepEqual(other, { messageId: "m-2", to: ARGS.to });
  assert.equal(outbox.count, 2);
});

dbTest("a key reused with other arguments is refused, and the client is told why", async () => {
  const outbox = new Effects();
  const client = await connected(mailServer(outbox, scopeFor("mcp-mismatch")));
  const meta = { idempotencyKey: `order-42-${randomUUID()}` };
  await structured(client, ARGS, meta);
  const refused = await client.callTool({ name: "send_email", arguments: { ...ARGS, to: "bob@example.com" }, _meta: meta });
  await client.close();
  assert.equal(refused.isError, true);
  const told = JSON.stringify(refused.content);
  assert.match(told, /Mismatch: idempotency key reused with a different request/);
  assert.match(told, /HINT: Use a new key for a different request/);
  assert.equal(outbox.count, 1);
});

dbTest("a tool's error result is not remembered: the retry runs again; cacheFailures keeps it", async () => {
  for (const cacheFailures of [false, true]) {
    const tries = new Effects();
    const server = new McpServer({ name: "mail", version: "1.0.0" });
    server.registerTool(
      "send_email",
      { inputSchema: { to: z.string() } },
      idempotentHandler(
        "send_email",
        async ({ to }) =>
          tries.add(to) === 1
            ? { content: [{ type: "text" as const, text: "the mail provider is down" }], isError: true }
            : { content: [{ type: "text" as const, text: "sent" }] },
        { store, scope: scopeFor(`mcp-error-${cacheFailures}`), cacheFailures },
      ),
    );
    const client = await connected(server);
    const first = await client.callTool({ name: "send_email", arguments: { to: ARGS.to } });
    const again = await client.callTool({ name: "send_email", arguments: { to: ARGS.to } });
    await client.close();
    assert.deepEqual(first, { content: [{ type: "text", text: "the mail provider is down" }], isError: true });
    if (cacheFailures) {
      assert.equal(tries.count, 1);
      assert.equal(again.isError, true);
      assert.match(JSON.stringify(again.content), /ToolFailed: .*the mail provider is down/);
    } else {
      assert.equal(tries.count, 2);
      assert.deepEqual(again.content, [{ type: "text", text: "sent" }]);
    }
  }
});

dbTest("a stdio server restarted between the calls sends one email", async () => {
  // The server is its own process (the SDK's stdio transport) writing to an outbox table;
  // the first process ends after the call, a new one answers the retry.
  const scope = scopeFor("mcp-stdio");
  await sql().query("CREATE TABLE IF NOT EXISTS ts_frameworks_outbox (scope text, recipient text, subject text)");
  const script = fileURLToPath(new URL("../support/mcp-mail-server.js", import.meta.url));
  const results: unknown[] = [];
  for (let i = 0; i < 2; i++) {
    const client = new Client({ name: "agent", version: "1.0.0" });
    const env = { ...(process.env as Record<string, string>), PGIDEM_DSN: DSN, MAIL_SCOPE: scope };
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [script], env, stderr: "inherit" }));
    results.push(await structured(client, ARGS));
    await client.close();
  }
  const rows = await sql().query("SELECT recipient, subject FROM ts_frameworks_outbox WHERE scope = $1", [scope]);
  assert.deepEqual(rows.rows, [{ recipient: ARGS.to, subject: ARGS.subject }]);
  assert.deepEqual(results[1], results[0]);
  assert.equal((results[0] as { to: string }).to, ARGS.to);
});

test("the adapter refuses what would name another key, and a name the key cannot hold", () => {
  const handler = async () => ({ content: [] });
  assert.throws(() => idempotentHandler("send_email", handler, { strategy: "hashInput" } as never), /makes the key itself: strategy/);
  assert.throws(() => idempotentHandler("", handler), InvalidArgument);
});
