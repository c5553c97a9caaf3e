/**
 * An MCP server written with the official TypeScript SDK (`@modelcontextprotocol/sdk`): a
 * tool handler keyed as pg-idempotency-mcp keys a call (docs/mcp.md, "The key") and as the
 * Python package's `pg_idempotency.integrations.mcp` does.
 *
 *     import { idempotentHandler } from "pg-idempotency/mcp";
 *
 *     server.registerTool(
 *       "send_email",
 *       { description: "Send an email.", inputSchema: { to: z.string(), subject: z.string() } },
 *       idempotentHandler("send_email", async ({ to, subject }) => ({
 *         content: [{ type: "text", text: await provider.send(to, subject) }],
 *       }), { ttl: 86_400_000 }),
 *     );
 *
 * The key is the request's `_meta` "pg-idempotency/key" or "idempotencyKey" (the MCP
 * proposal SEP-3182), else the arguments' HASH_INPUT digest; never the JSON-RPC id, which a
 * retry changes. A server does not see the agent's run: an agent that wants its run in
 * the key sends `_meta: { idempotencyKey: agentKey(runId, "send_email", args) }`. The
 * arguments are the fingerprint either way: the same key with other arguments is refused
 * (Mismatch). A refusal (Mismatch, InProgress, OutcomeUnknown, a remembered failure, ...)
 * reaches the client as the tool's error result with its detail and hint, which the model
 * can act on. The handler's own error result (`isError: true`) is its failure: not
 * remembered, so a retry runs it again (unless `cacheFailures`). The operator's problems
 * (the store unreachable, not installed, not permitted) are thrown, and the SDK reports
 * them as it reports any failing tool.
 */

import { inputHash } from "../canonical.js";
import { GrantRoleCaller, IdempotencyError, NotInstalled, NotPermitted, StoreUnavailable } from "../errors.js";
import { idempotent } from "../idempotent.js";
import { checkMembers, checkToolName } from "./tool.js";
import type { ToolOptions } from "./tool.js";

/** The `_meta` members that name the key, first found first. */
export const KEY_META = ["pg-idempotency/key", "idempotencyKey"] as const;

const SERVER_SIDE = [StoreUnavailable, NotInstalled, NotPermitted, GrantRoleCaller];

/** What the handler is given after the arguments (the SDK's RequestHandlerExtra), in part. */
export interface HandlerExtra {
  readonly _meta?: Readonly<Record<string, unknown>> | undefined;
}

/** A tool's result, as far as the adapter makes one (the SDK's CallToolResult). */
export interface ToolErrorResult {
  [member: string]: unknown;
  content: { type: "text"; text: string }[];
  isError: true;
}

/** The key the request's `_meta` names, if any. */
export function metaKey(extra: unknown): string | undefined {
  const meta = (extra as HandlerExtra | undefined)?._meta;
  if (typeof meta !== "object" || (meta as unknown) === null) return undefined;
  for (const name of KEY_META) {
    const value = meta[name];
    if (typeof value === "string" && value.trim() !== "") return value;
  }
  return undefined;
}

/**
 * A tool handler (`(args, extra) => result`) deduplicated: keyed on the request's `_meta`
 * key, else the arguments' digest; fingerprinted by the arguments. `name` is the tool's (the
 * scope, unless `options.scope`); `options` are idempotent()'s (ttl, store, wait, ...).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the SDK's handler, whatever its argument types
export function idempotentHandler<H extends (args: any, extra: any) => unknown>(name: string, handler: H, options: ToolOptions = {}): H {
  checkMembers(options, "idempotentHandler");
  const tool = checkToolName(name, "idempotentHandler", 'pass the name the tool is registered under: idempotentHandler("send_email", ...)');
  interface Call {
    idempotencyKeyFor(args: unknown): string;
    body(): Promise<unknown>;
  }
  const wrapped = idempotent(
    async function (this: Call, _args: Record<string, unknown>): Promise<unknown> {
      return this.body();
    },
    { scope: tool, fingerprint: "input", ...options, strategy: "explicit" },
  );
  const adapted = async (args: unknown, extra: unknown): Promise<unknown> => {
    const call: Call = {
      idempotencyKeyFor: (input) => metaKey(extra) ?? inputHash(input),
      body: async () => {
        const result: unknown = await handler(args, extra);
        // A tool's error result is its failure (a Python tool raises ToolError): completed
        // as one, so a retry runs again unless cacheFailures keeps it.
        if (isErrorResult(result)) throw new ErrorResult(result);
        return result;
      },
    };
    try {
      return await wrapped.call(call, (args ?? {}) as Record<string, unknown>);
    } catch (e) {
      if (e instanceof ErrorResult) return e.result;
      if (!(e instanceof IdempotencyError) || SERVER_SIDE.some((c) => e instanceof c)) throw e;
      return told(e);
    }
  };
  return adapted as H;
}

/** The handler's own error result, carried through idempotent() as its failure. */
class ErrorResult extends Error {
  constructor(readonly result: { isError: true }) {
    super(errorText(result));
    this.name = "ToolError";
  }
}

function isErrorResult(value: unknown): value is { isError: true } {
  return typeof value === "object" && value !== null && (value as { isError?: unknown }).isError === true;
}

/** What a remembered failure replays (ToolFailed's response.error): the result's text. */
function errorText(result: object): string {
  const content = (result as { content?: unknown }).content;
  const texts = Array.isArray(content)
    ? content.flatMap((c: unknown) => (typeof c === "object" && c !== null && typeof (c as { text?: unknown }).text === "string" ? [(c as { text: string }).text] : []))
    : [];
  return texts.join("\n") || "the tool returned an error result";
}

function told(e: IdempotencyError): ToolErrorResult {
  return { content: [{ type: "text", text: e.toString() }], isError: true };
}
