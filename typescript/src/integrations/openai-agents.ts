/**
 * The OpenAI Agents SDK for JavaScript (`@openai/agents`): a function tool keyed on the run,
 * not on the model's call id.
 *
 *     import { Agent, run, tool } from "@openai/agents";
 *     import { idempotentTool } from "pg-idempotency/openai-agents";
 *
 *     const sendEmail = tool(
 *       idempotentTool({
 *         name: "send_email",
 *         description: "Send an email.",
 *         parameters: z.object({ to: z.string(), subject: z.string() }),
 *         execute: async ({ to, subject }) => provider.send(to, subject),
 *       }, { ttl: 86_400_000 }),
 *     );
 *     await run(agent, "Email Ann", { context: { runId: request.id } });
 *
 * The key is `agentKey(runId, "send_email", { to, subject })`. The SDK has no run id of its
 * own that survives a retry, so the run id is the context's: its `runId` member, or what
 * `runId: (ctx) => ...` reads from the RunContext. `idempotentTool` takes tool()'s options
 * and gives them back with `execute` wrapped, so the schema, the description and the name
 * the model sees are tool()'s own; no part of the SDK is imported.
 */

import { checkMembers, checkToolName, runKeyed } from "./tool.js";
import type { ToolOptions } from "./tool.js";

/** The RunContext a tool is given, as far as the adapter reads it. */
export interface RunContextLike {
  readonly context: unknown;
}

/** tool()'s options, as far as the adapter reads them. */
export interface FunctionToolOptions {
  name?: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the SDK's execute, whatever its input and context types
  execute: (input: any, runContext?: any, details?: any) => unknown;
}

/** What tool() hands execute for `parameters` of type P: a Standard Schema's output (Zod's
 * schemas are Standard Schemas), else unknown (a JSON schema's arguments). */
export type ArgumentsOf<P> = P extends { readonly "~standard": { readonly types?: infer T } }
  ? NonNullable<T> extends { readonly output: infer A }
    ? A
    : unknown
  : unknown;

/** The RunContext type `O`'s execute declares (RunContextLike when it declares none). */
export type RunContextOf<O> = O extends { execute: (input: never, runContext?: infer R) => unknown }
  ? unknown extends R
    ? RunContextLike
    : [Exclude<R, undefined>] extends [never]
      ? RunContextLike
      : Exclude<R, undefined>
  : RunContextLike;

export interface AgentToolOptions<R = RunContextLike> extends ToolOptions {
  /** Where the run id is: a function of the RunContext (default: its context's `runId`). */
  runId?: (runContext: R) => unknown;
}

const HINT =
  "give the run's id in the context: run(agent, input, { context: { runId: request.id } }), " +
  "or say where it is: idempotentTool(options, { runId: (ctx) => ctx.context.jobId })";

/** The default run id: the context's `runId` member. */
export function contextRunId(runContext: unknown): unknown {
  const context = (runContext as Partial<RunContextLike> | undefined)?.context;
  return typeof context === "object" && context !== null ? (context as { runId?: unknown }).runId : undefined;
}

/**
 * tool()'s options with `execute` deduplicated: keyed on the run id, the tool's name
 * (`name`, else execute's, as tool() names it) and the arguments. `options` are
 * idempotent()'s (ttl, store, scope (default: the tool's name), wait, ...), plus `runId`.
 */
export function idempotentTool<P, O extends object>(
  // The intersection types execute's input from parameters, as tool() itself does: the
  // options are typed here, before tool() sees them.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the SDK's RunContext and details, whatever their types
  toolOptions: O & { parameters: P; execute: (input: ArgumentsOf<P>, runContext?: any, details?: any) => unknown },
  options: AgentToolOptions<RunContextOf<O>> = {},
): O {
  const { runId, ...members } = options;
  checkMembers(members, "idempotentTool");
  const execute = toolOptions.execute as FunctionToolOptions["execute"];
  const name = checkToolName((toolOptions as { name?: string }).name ?? execute.name, "idempotentTool", 'give the tool a name: { name: "send_email", ... }');
  const call = runKeyed(name, members, HINT);
  const read = (runId ?? contextRunId) as (runContext: unknown) => unknown;
  const wrapped = async (input: unknown, runContext?: unknown, details?: unknown): Promise<unknown> =>
    call(read(runContext), input, async () => Promise.resolve(execute(input, runContext, details)));
  // The name is given explicitly: tool() would otherwise name the tool after the wrapper.
  return { ...toolOptions, name, execute: wrapped };
}
