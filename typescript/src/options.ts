/**
 * The wrapper's members: the Java framework's `@Idempotent` (strategy, ttl, onCacheHit,
 * cacheFailures) and the ones the Rust client added (lease, wait, onMismatch,
 * onUnknownOutcome, fingerprint, unresolvedTtl). Every member is unset by default: an unset
 * store setting is not sent, so a scope's policy in the database (idem_set_policy) governs
 * the call, then the server's settings (docs/client.md, "Which setting governs a call").
 * Durations are milliseconds; the SQL receives seconds.
 */

import { InvalidArgument } from "./errors.js";
import type { PgQueryable, PostgresSql, StoreSource } from "./drivers/index.js";
import type { Store } from "./store.js";

/** How the key is derived from the call. */
export type KeyStrategy =
  /** SHA-256 of the canonical JSON of the input (computed by the server). */
  | "hashInput"
  /** A key function, named fields, or the receiver's `idempotencyKeyFor(input)`. */
  | "explicit"
  /** A fresh key per call, for the function to send upstream; nothing deduplicated here. */
  | "uuid"
  /** No protection: the function runs on every call. */
  | "none";

/** What a repeat of a remembered call gets. */
export type OnCacheHit = "returnCached" | "returnCachedIfSuccess" | "failFast";

/** A repeat whose fingerprint differs from the first call's. */
export type OnMismatch = "reject" | "ignore";

/** A reconcile read's answer: the earlier attempt did not act; the function runs. */
export const NOT_FOUND: unique symbol = Symbol("pg-idempotency.NOT_FOUND");
/** A reconcile read's answer: it cannot tell; the call is refused as OutcomeUnknown. */
export const UNKNOWN: unique symbol = Symbol("pg-idempotency.UNKNOWN");

/**
 * What a reconcile read is given: the call's input, scope and key, the dead attempt's
 * upstream key (the Idempotency-Key it sent upstream), and this attempt's number.
 */
export interface Reconcile<I = unknown> {
  readonly input: I;
  readonly scope: string;
  readonly key: string;
  readonly upstreamKey: string;
  readonly attempt: number;
}

/**
 * A reconcile read: what the earlier attempt did (recorded and returned), NOT_FOUND (the
 * function runs) or UNKNOWN (refused, as is a read that throws).
 */
export type ReconcileRead<I = unknown> = (
  call: Reconcile<I>,
) => unknown;

export type UnknownOutcome<I = unknown> = "rerun" | "refuse" | ReconcileRead<I>;

/** What `transaction` picks: a node-postgres `Client` or `PoolClient`, or the `sql` of a
 * postgres.js transaction (`sql.begin(async (tx) => ...)`). */
export type TransactionClient = PgQueryable | PostgresSql;

/** The members of `idempotent(fn, options)`; `I` is the call's input (see `idempotent`), `A`
 * its arguments. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any arguments unless the function's are known
export interface IdempotentOptions<I = unknown, A extends readonly unknown[] = any[]> {
  /** hashInput (default), explicit (with key or keyFields), uuid, none. */
  strategy?: KeyStrategy;
  /** How long the result is remembered, in milliseconds (the policy's, else 1 hour). */
  ttl?: number;
  /** returnCached (default), returnCachedIfSuccess, failFast. */
  onCacheHit?: OnCacheHit;
  /** Remember a failure (replayed as ToolFailed), or let a retry run again (default). */
  cacheFailures?: boolean;
  /** How long a claim is held before another attempt may take it over, in milliseconds;
   * renewed by a heartbeat while the function runs (the policy's, else 60 s). */
  lease?: number;
  /** A duplicate that arrives while the call runs waits up to this (ms) for its result
   * (default 0: InProgress at once). */
  wait?: number;
  /** reject (default: Mismatch) or ignore, when a repeat's fingerprint differs. */
  onMismatch?: OnMismatch;
  /** A takeover of a call whose earlier attempt may have acted: rerun (default), refuse,
   * or a reconcile read. */
  onUnknownOutcome?: UnknownOutcome<I>;
  /** How long a call whose outcome is unknown is kept for an operator, in milliseconds. */
  unresolvedTtl?: number;
  /** explicit: the key, a function of the input. */
  key?: (input: I) => string;
  /** explicit: dotted paths into the input (object members, array indexes); several are
   * joined with "/". */
  keyFields?: string | readonly string[];
  /** explicit: what a repeat must match: "input", or dotted paths. */
  fingerprint?: string | readonly string[];
  /** The record's scope (default: the function's name). */
  scope?: string;
  /** A Store, a connection string, or a pg Pool (a Store is made for it once) (default:
   * configure()'s). */
  store?: Store | StoreSource;
  /**
   * Exactly once with the function's own writes: picks, from the call's arguments, the
   * client the function writes with (a pg `Client` or `PoolClient`, or a postgres.js
   * transaction's `sql`). The claim, the function's writes and the completion are then one
   * transaction: a savepoint inside the caller's, or a transaction of its own on an idle pg
   * client. The client is not part of the call's input.
   */
  transaction?: (...args: A) => TransactionClient;
}

/** The members, checked and normalised once per wrapped function. */
export interface Settings {
  readonly strategy: KeyStrategy;
  readonly ttlS: number | null;
  readonly leaseS: number | null;
  readonly waitS: number | null;
  readonly unresolvedTtlS: number | null;
  readonly onCacheHit: OnCacheHit | null;
  readonly onMismatch: OnMismatch | null;
  readonly cacheFailures: boolean | null;
  readonly onUnknownOutcome: UnknownOutcome | null;
  readonly key: ((input: unknown) => unknown) | null;
  readonly keyFields: readonly string[];
  /** "input", field paths, or nothing. */
  readonly fingerprint: "input" | readonly string[] | null;
  readonly scope: string | null;
  readonly store: Store | StoreSource | null;
  readonly transaction: ((...args: unknown[]) => unknown) | null;
}

const MEMBERS = new Set([
  "strategy",
  "ttl",
  "onCacheHit",
  "cacheFailures",
  "lease",
  "wait",
  "onMismatch",
  "onUnknownOutcome",
  "unresolvedTtl",
  "key",
  "keyFields",
  "fingerprint",
  "scope",
  "store",
  "transaction",
]);

/** The server's words for the TypeScript ones. */
const SERVER_WORDS: Readonly<Record<string, string>> = {
  returnCached: "return_cached",
  returnCachedIfSuccess: "return_cached_if_success",
  failFast: "fail_fast",
  reject: "reject",
  ignore: "ignore",
};

/** A word as the server spells it; an unknown word is sent as given, for the server to
 * refuse with its own detail and hint. */
export function serverWord(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return SERVER_WORDS[value] ?? value;
}

/** Milliseconds as the seconds the SQL receives (null: not sent). */
export function seconds(value: number | null | undefined, name: string): number | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== "number" || Number.isNaN(value)) {
    throw new InvalidArgument(`${name} must be a number of milliseconds`, {
      detail: `${name} is ${describe(value)}.`,
      hint: `${name}: 86_400_000 (a day), or 60_000 (a minute)`,
    });
  }
  return value / 1000;
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "function") return "a function";
  return String(value);
}

function word<T extends string>(value: unknown, name: string, choices: readonly T[]): T | null {
  if (value === undefined || value === null) return null;
  if (typeof value === "string" && (choices as readonly string[]).includes(value)) return value as T;
  throw new InvalidArgument(`${name} must be one of ${choices.map((c) => `"${c}"`).join(", ")}`, {
    detail: `${name} is ${describe(value)}.`,
    hint: `${name}: "${choices[0] ?? ""}"`,
  });
}

function names(value: unknown, name: string): readonly string[] {
  const items: unknown[] = typeof value === "string" ? [value] : Array.isArray(value) ? value : [];
  if (items.length === 0 || !items.every((i) => typeof i === "string" && i !== "")) {
    throw new InvalidArgument(`${name} must name fields (dotted paths into the input)`, {
      detail: `${name} is ${describe(value)}.`,
      hint: `${name}: ["order.id", "customer"]`,
    });
  }
  return items as string[];
}

/** The settings of one function (or, on a class, of its methods), checked at once: a
 * mistake is an error where the function is wrapped, not at its first call. */
export function settingsOf(options: IdempotentOptions<never, never> | undefined): Settings {
  const given = (options ?? {}) as Readonly<Record<string, unknown>>;
  const unknown = Object.keys(given).filter((k) => !MEMBERS.has(k));
  if (unknown.length > 0) {
    throw new InvalidArgument(`idempotent got unknown member(s): ${unknown.sort().join(", ")}`, {
      hint: `the members are: ${[...MEMBERS].sort().join(", ")}`,
    });
  }
  const key = given["key"];
  if (key !== undefined && typeof key !== "function") {
    throw new InvalidArgument("key must be a function of the call's input that returns the key", {
      detail: `key is ${describe(key)}.`,
      hint: 'key: (input) => input.orderId, or keyFields: ["orderId"]',
    });
  }
  const keyFields = given["keyFields"] === undefined ? [] : names(given["keyFields"], "keyFields");
  let strategy = word(given["strategy"], "strategy", ["hashInput", "explicit", "uuid", "none"] as const);
  // A key function or named fields mean explicit; they name no other strategy.
  if (key !== undefined || keyFields.length > 0) {
    if (strategy !== null && strategy !== "explicit") {
      throw new InvalidArgument("key and keyFields name the key of the explicit strategy", {
        detail: `strategy is "${strategy}".`,
        hint: "drop strategy, or the key",
      });
    }
    strategy = "explicit";
  }
  if (key !== undefined && keyFields.length > 0) {
    throw new InvalidArgument("give key or keyFields, not both");
  }
  strategy ??= "hashInput";
  const fp = given["fingerprint"];
  const fingerprint = fp === undefined ? null : fp === "input" ? "input" : names(fp, "fingerprint");
  if (fingerprint !== null && strategy === "hashInput") {
    throw new InvalidArgument("fingerprint applies to explicit keys", {
      detail: "Under hashInput the key is the hash of the whole input: it is the fingerprint.",
      hint: "drop fingerprint, or name the key (key or keyFields)",
    });
  }
  const unknownOutcome = given["onUnknownOutcome"];
  if (
    unknownOutcome !== undefined &&
    typeof unknownOutcome !== "function" &&
    unknownOutcome !== "rerun" &&
    unknownOutcome !== "refuse"
  ) {
    throw new InvalidArgument('onUnknownOutcome must be "rerun", "refuse" or a reconcile read', {
      detail: `onUnknownOutcome is ${describe(unknownOutcome)}.`,
      hint: 'onUnknownOutcome: "refuse", or (call) => found ?? NOT_FOUND',
    });
  }
  const cacheFailures = given["cacheFailures"];
  if (cacheFailures !== undefined && typeof cacheFailures !== "boolean") {
    throw new InvalidArgument("cacheFailures must be true or false", {
      detail: `cacheFailures is ${describe(cacheFailures)}.`,
    });
  }
  const scope = given["scope"];
  if (scope !== undefined && (typeof scope !== "string" || scope.trim() === "")) {
    throw new InvalidArgument("scope must be a non-blank string", {
      detail: `scope is ${describe(scope)}.`,
      hint: 'scope: "send_email"',
    });
  }
  const store = given["store"];
  const transaction = given["transaction"];
  if (transaction !== undefined && typeof transaction !== "function") {
    throw new InvalidArgument("transaction must be a function that picks the transaction's client from the call's arguments", {
      detail: `transaction is ${describe(transaction)}.`,
      hint: "transaction: (client, order) => client",
    });
  }
  if (transaction !== undefined && (strategy === "uuid" || strategy === "none")) {
    throw new InvalidArgument(`transaction applies to calls that are claimed, not to strategy "${strategy}"`, {
      hint: "drop transaction, or the strategy",
    });
  }
  return {
    strategy,
    ttlS: seconds(given["ttl"] as number | undefined, "ttl"),
    leaseS: seconds(given["lease"] as number | undefined, "lease"),
    waitS: seconds(given["wait"] as number | undefined, "wait"),
    unresolvedTtlS: seconds(given["unresolvedTtl"] as number | undefined, "unresolvedTtl"),
    onCacheHit: word(given["onCacheHit"], "onCacheHit", ["returnCached", "returnCachedIfSuccess", "failFast"] as const),
    onMismatch: word(given["onMismatch"], "onMismatch", ["reject", "ignore"] as const),
    cacheFailures: cacheFailures ?? null,
    onUnknownOutcome: (unknownOutcome as UnknownOutcome | undefined) ?? null,
    key: (key as ((input: unknown) => unknown) | undefined) ?? null,
    keyFields,
    fingerprint,
    scope: scope ?? null,
    store: (store as Store | StoreSource | undefined) ?? null,
    transaction: (transaction as ((...args: unknown[]) => unknown) | undefined) ?? null,
  };
}
