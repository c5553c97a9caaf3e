/**
 * What the framework adapters share: a tool call keyed on the run's id, the tool's name and
 * the arguments' digest (`agentKey`), never on the model's per-turn tool-call id. The
 * Python package's `pg_idempotency.integrations._tool`.
 */

import { agentKey } from "../agent-keys.js";
import { InvalidArgument } from "../errors.js";
import { idempotent } from "../idempotent.js";
import type { IdempotentOptions } from "../options.js";

/** The members of `idempotent` an adapter takes: all but the ones that name a key, which
 * the adapter makes itself. */
export type ToolOptions = Omit<IdempotentOptions<Record<string, unknown>>, "strategy" | "key" | "keyFields">;

// The adapters make the key: these members would name another one.
const KEY_MEMBERS = ["key", "keyFields", "strategy"] as const;

/** Refuse the members that would name another key (a JavaScript caller is not held to
 * the types). */
export function checkMembers(options: object, adapter: string): void {
  for (const name of KEY_MEMBERS) {
    if ((options as Record<string, unknown>)[name] !== undefined) {
      throw new InvalidArgument(`${adapter} makes the key itself: ${name} names another one`, {
        hint: "drop it, or use idempotent(fn, { key }) for a key of your own",
      });
    }
  }
}

/** A name the key can hold: the tool's, as the framework knows it. */
export function checkToolName(name: unknown, adapter: string, hint: string): string {
  if (typeof name !== "string" || name.trim() === "" || name.includes(":")) {
    throw new InvalidArgument(`${adapter} needs the tool's name, without ':'`, {
      detail: `The name is ${typeof name === "string" ? JSON.stringify(name) : String(name)}.`,
      hint,
    });
  }
  return name;
}

/** Runs a tool's body once per `agentKey(runId, tool, args)`. */
export type RunKeyed = <R>(runId: unknown, args: unknown, body: () => Promise<R>) => Promise<R>;

/**
 * `idempotent` keyed on `agentKey(runId, tool, args)`; the scope is `options.scope`, else the
 * tool's name (as a Python tool's function name is its scope). `args` is the call's input
 * (what `currentCall().input` and a reconcile read see); the run id is checked before
 * anything is sent: no run id is an InvalidArgument whose hint is `noRunIdHint`.
 */
export function runKeyed(tool: string, options: ToolOptions, noRunIdHint: string): RunKeyed {
  // The key comes from the receiver's idempotencyKeyFor (the explicit strategy's key
  // supplier): each call brings its own run id and body, so nothing is shared between
  // concurrent calls, and one wrapped function (its options checked once) serves them all.
  interface Call {
    idempotencyKeyFor(args: unknown): string;
    body(): Promise<unknown>;
  }
  const wrapped = idempotent(
    async function (this: Call, _args: Record<string, unknown>): Promise<unknown> {
      return this.body();
    },
    { scope: tool, ...options, strategy: "explicit" },
  );
  return async <R>(runId: unknown, args: unknown, body: () => Promise<R>): Promise<R> => {
    const call: Call = {
      idempotencyKeyFor(input: unknown): string {
        if (typeof runId !== "string" || runId.trim() === "") {
          throw new InvalidArgument(`no run id for the call of ${tool}`, {
            detail: `The run id is ${typeof runId === "string" ? JSON.stringify(runId) : String(runId)}.`,
            hint: noRunIdHint,
          });
        }
        return agentKey(runId, tool, input);
      },
      body,
    };
    return (await wrapped.call(call, args as Record<string, unknown>)) as R;
  };
}
