/**
 * A call's input and its key under each strategy.
 *
 * The input is the function's first argument when the function takes one (the shape of
 * every agent framework's tool: one object of named arguments, so a TypeScript tool and a
 * Python tool of the same name and input share keys). A function of several parameters
 * (its `length`) has the array of its arguments; so does a function of none (`...args`)
 * called with several. A call with no argument has `{}`, as a Python function of no
 * parameters. Arguments past the parameters a function declares (a framework's context
 * object after a tool's input) are not part of the input.
 */

import { toolCallIdIn, warnIfToolCallId } from "./agent-keys.js";
import { InvalidArgument } from "./errors.js";
import type { KeyStrategy, Settings } from "./options.js";
import { dumps, toJson } from "./sql.js";

export function inputOf(fn: { length: number }, args: readonly unknown[]): unknown {
  if (fn.length >= 2 || (fn.length === 0 && args.length >= 2)) return [...args];
  return args.length === 0 ? {} : args[0];
}

/**
 * The input of a call whose `client` (exactly once: the transaction's) is among its
 * arguments: the input of the others, as if the function did not take it. The client in a
 * member of a one-object argument (`{ tx, orderId }`) is left out of that object too: it is
 * not JSON, and not what the call is about.
 */
export function inputWithout(fn: { length: number }, args: readonly unknown[], client: unknown): unknown {
  const rest = args.filter((a) => a !== client);
  const input = inputOf({ length: Math.max(0, fn.length - (args.length - rest.length)) }, rest);
  if (typeof input !== "object" || input === null || Array.isArray(input)) return input;
  const entries = Object.entries(input);
  if (!entries.some(([, v]) => v === client)) return input;
  return Object.fromEntries(entries.filter(([, v]) => v !== client));
}

function missing(path: string, part: string): InvalidArgument {
  return new InvalidArgument(`the call has no field ${JSON.stringify(path)}`, {
    detail: `${JSON.stringify(part)} is missing from the input.`,
    hint: "keyFields and fingerprint name fields of the input as dotted paths",
  });
}

function has(value: unknown, part: string): value is Record<string, unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    part in value
  );
}

/** A dotted path into the input: object members (own or inherited, getters included) and
 * array indexes. */
export function fieldOf(input: unknown, path: string): unknown {
  if (has(input, path)) return input[path]; // a member's name (most key fields): nothing to walk
  let value: unknown = input;
  for (const part of path.split(".")) {
    if (Array.isArray(value) && /^\d+$/.test(part)) {
      const i = Number(part);
      if (i >= value.length) throw missing(path, part);
      value = value[i] as unknown;
    } else if (has(value, part)) {
      value = value[part];
    } else {
      throw missing(path, part);
    }
  }
  return value;
}

const text = (v: unknown): string => (typeof v === "string" ? v : dumps(v));

/** What supplies an explicit key when no key function or fields are given: the Java
 * framework's IdempotencyKeySupplier, as a method of the receiver. */
interface KeySupplier {
  idempotencyKeyFor(input: unknown): unknown;
}

function isKeySupplier(receiver: unknown): receiver is KeySupplier {
  return (
    typeof receiver === "object" &&
    receiver !== null &&
    typeof (receiver as Partial<KeySupplier>).idempotencyKeyFor === "function"
  );
}

function keySource(settings: Settings, receiver: unknown): string {
  if (settings.key !== null) return "the key function";
  if (settings.keyFields.length > 0) return `the key fields ${JSON.stringify(settings.keyFields)}`;
  const name = (receiver as { constructor?: { name?: string } } | null)?.constructor?.name ?? "the receiver";
  return `${name}.idempotencyKeyFor`;
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "string") return JSON.stringify(value);
  try {
    return toJson(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}

/**
 * The explicit key: the key function's, the named fields' (one field: its value, text as
 * it is, anything else as JSON; several: joined with "/"), or the receiver's
 * `idempotencyKeyFor(input)`.
 */
export function explicitKey(settings: Settings, input: unknown, receiver: unknown, scope?: string): string {
  let key: unknown;
  if (settings.key !== null) {
    key = settings.key(input);
  } else if (settings.keyFields.length > 0) {
    const fields = settings.keyFields;
    key = fields.length === 1 ? text(fieldOf(input, fields[0] ?? "")) : fields.map((f) => text(fieldOf(input, f))).join("/");
  } else if (isKeySupplier(receiver)) {
    key = receiver.idempotencyKeyFor(input);
  } else {
    throw new InvalidArgument("the explicit strategy needs a key", {
      detail: "No key function, no key fields, and no idempotencyKeyFor on the receiver.",
      hint:
        'idempotent(fn, { key: (input) => input.orderId }) or keyFields: ["orderId"], ' +
        "or define idempotencyKeyFor(input) on the class",
    });
  }
  if (typeof key !== "string" || key.trim() === "") {
    throw new InvalidArgument("the explicit key is blank", {
      detail: `${keySource(settings, receiver)} returned ${describe(key)}.`,
      hint: "return a non-blank string that names the call",
    });
  }
  // A key that looks like a per-turn tool-call id deduplicates nothing in an agent loop:
  // warned once per scope (agent-keys.ts). The source is named only then.
  if (toolCallIdIn(key) !== undefined) warnIfToolCallId(scope, key, keySource(settings, receiver));
  return key;
}

/** What is fingerprinted (and, under hashInput, what the key is derived from). */
export function requestOf(settings: Settings, strategy: KeyStrategy, input: unknown): unknown {
  if (strategy === "hashInput" || settings.fingerprint === "input") return input;
  if (settings.fingerprint !== null) {
    const out: Record<string, unknown> = {};
    for (const f of settings.fingerprint) out[f] = fieldOf(input, f);
    return out;
  }
  return undefined;
}

/** JSON with every object's members sorted: one text for one value, whatever the order its
 * members were written in. */
function sortedJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(",")}]`;
  if (typeof value === "object" && value !== null) {
    const obj = value as Record<string, unknown>;
    const members = Object.keys(obj)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${sortedJson(obj[k])}`);
    return `{${members.join(",")}}`;
  }
  return JSON.stringify(value);
}

/** A name for the call in this process before the server derived its key: the key, else
 * (hashInput) the request's JSON with sorted members. */
export function localName(key: string | null, requestJson: string | null): string {
  if (key !== null) return `k:${key}`;
  return `r:${sortedJson(JSON.parse(requestJson ?? "null"))}`;
}
