/**
 * The Vercel AI SDK (`ai`): a tool whose calls are keyed on the run, not on the model's
 * tool-call id.
 *
 *     import { generateText, tool } from "ai";
 *     import { idempotentTool } from "pg-idempotency/ai";
 *
 *     const tools = {
 *       send_email: idempotentTool(
 *         tool({ description: "Send an email.", inputSchema, execute: async ({ to, subject }) => send(to, subject) }),
 *         { name: "send_email", runId: request.id, ttl: 86_400_000 },
 *       ),
 *     };
 *
 * The key is `agentKey(runId, "send_email", { to, subject })`. The SDK has no run id that
 * survives a retry, and a tool does not know the name it is registered under: `name` is
 * that name, `runId` your request's or job's id (a string, for tools made per request), or
 * a function of the execution options that reads it (`({ context }) => context.runId`).
 * Only `execute` changes: the schema and description the model sees are the tool's own.
 *
 * The SDK's types are not imported (the shapes below are what the adapter touches): the
 * package's declarations stay free of the framework's, which do not pass a strict
 * `skipLibCheck: false` check without the DOM library.
 */

import { InvalidArgument } from "../errors.js";
import { checkMembers, checkToolName, runKeyed } from "./tool.js";
import type { ToolOptions } from "./tool.js";

/** What `execute` is given besides the input (the SDK's ToolExecutionOptions, in part). */
export interface ExecutionOptions {
  readonly toolCallId: string;
  readonly context?: unknown;
  readonly abortSignal?: AbortSignal;
}

/** An AI SDK tool, as far as the adapter reads it. */
export interface ExecutableTool {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the SDK's execute, whatever its input and context types
  execute?: ((input: any, options: any) => unknown) | undefined;
}

/** The second parameter of `T`'s execute: the SDK's ToolExecutionOptions<Context>. */
export type ExecutionOf<T extends ExecutableTool> = T["execute"] extends (input: never, options: infer O) => unknown ? O : ExecutionOptions;

export interface AiToolOptions<E = ExecutionOptions> extends ToolOptions {
  /** The name the tool has in `tools` (the model calls it by it). */
  name: string;
  /** The run's id, or a function of the call's execution options that reads it: what
   * stays the same when the turn is retried or the run resumed. Never `toolCallId`. */
  runId: string | ((execution: E) => unknown);
}

const HINT =
  "give the run's id: idempotentTool(tool, { name, runId: request.id }), or read it from the " +
  "tool's context: runId: ({ context }) => context.runId";

/**
 * The AI SDK tool `tool` with its `execute` deduplicated: a call with the run id and
 * arguments of an earlier one gets the earlier result, and `execute` runs once per key.
 * `options` are idempotent()'s (ttl, store, scope (default: `name`), wait, ...), plus
 * `name` and `runId`.
 */
export function idempotentTool<T extends ExecutableTool>(tool: T, options: AiToolOptions<ExecutionOf<T>>): T {
  const { name, runId, ...members } = options;
  checkMembers(members, "idempotentTool");
  const toolName = checkToolName(name, "idempotentTool", 'pass the key the tool has in tools: { name: "send_email" }');
  const execute = tool.execute;
  if (typeof execute !== "function") {
    throw new InvalidArgument(`the tool ${toolName} has no execute`, {
      detail: "A tool without execute is run by the caller or the provider: there is nothing here to deduplicate.",
      hint: "give the tool an execute function, or deduplicate where the tool is run",
    });
  }
  const call = runKeyed(toolName, members, HINT);
  const wrapped = async (input: unknown, execution: ExecutionOf<T>): Promise<unknown> => {
    const run = typeof runId === "function" ? runId(execution) : runId;
    return call(run, input, async () => {
      const result: unknown = await execute(input, execution);
      if (isAsyncIterable(result)) {
        // Streamed parts cannot be replayed as they came: refused before any runs (an async
        // generator's body starts at its first read).
        throw new InvalidArgument(`the tool ${toolName} streams its result`, {
          hint: "return the result instead of yielding it, or leave this tool without idempotentTool",
        });
      }
      return result;
    });
  };
  return { ...tool, execute: wrapped };
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === "object" && value !== null && Symbol.asyncIterator in value;
}
