/**
 * A stdio MCP server for test/frameworks/mcp.test.ts: its send_email tool writes a row to
 * an outbox table (the effect, seen by the test from another process) and is keyed by
 * the MCP adapter. PGIDEM_DSN names the database, MAIL_SCOPE the scope.
 */

import { randomUUID } from "node:crypto";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import pg from "pg";
import { z } from "zod";

import { Store } from "../../src/index.js";
import { idempotentHandler } from "../../src/integrations/mcp.js";

const DSN = process.env["PGIDEM_DSN"] ?? "";
const SCOPE = process.env["MAIL_SCOPE"] ?? "";
const pool = new pg.Pool({ connectionString: DSN, max: 2 });
const store = new Store(pool);

const server = new McpServer({ name: "mail", version: "1.0.0" });
server.registerTool(
  "send_email",
  { description: "Send an email.", inputSchema: { to: z.string(), subject: z.string() } },
  idempotentHandler(
    "send_email",
    async ({ to, subject }: { to: string; subject: string }) => {
      await pool.query("INSERT INTO ts_frameworks_outbox VALUES ($1, $2, $3)", [SCOPE, to, subject]);
      const sent = { messageId: randomUUID(), to };
      return { content: [{ type: "text" as const, text: JSON.stringify(sent) }], structuredContent: sent };
    },
    { store, scope: SCOPE },
  ),
);
await server.connect(new StdioServerTransport());
// The client closes stdin to end the server: the pool must not keep the process alive.
process.stdin.on("close", () => {
  void pool.end();
});
