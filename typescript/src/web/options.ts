/**
 * An Actions' options and a call's: fetch's own (RequestInit), the idempotency settings
 * (idempotent()'s members, less `store`), and what only a call says. Split and checked.
 */

import { InvalidArgument } from "../errors.js";
import type { IdempotentOptions } from "../options.js";
import type { Store } from "../store.js";
import type { StoreSource } from "../drivers/index.js";

/** What a Headers can be made of (an object, pairs, a Headers): fetch's HeadersInit, which
 * Node's types do not name. */
export type HeaderValues = ConstructorParameters<typeof Headers>[0];

/** What names a web call (what hashInput hashes, what `keyFields` and `fingerprint` read):
 * never its headers, nor a password in its URL. */
export interface WebInput {
  readonly method: string;
  /** scheme://host[:port]/path?query */
  readonly url: string;
  /** The `json` option, as a value. */
  readonly json?: unknown;
  /** Another body: its UTF-8 text, else `{ sha256 }` of its bytes. */
  readonly content?: string | { readonly sha256: string } | null;
  /** A Blob, FormData or stream body: only a key of the caller's names the call. */
  readonly streamed?: true;
}

/** Which key goes upstream as Idempotency-Key: the record's uuid (default), or the call's
 * own key. */
export type UpstreamKey = "record" | "call";

/** The settings an Actions gives every call that changes something. */
export type WebSettings = Omit<IdempotentOptions<WebInput>, "key" | "store"> & {
  upstreamKey?: UpstreamKey;
};

/** `new Actions(options)`. */
export interface ActionsOptions extends WebSettings {
  /** A Store, a connection string or a pg Pool (default: configure()'s). */
  store?: Store | StoreSource;
  /** The fetch to send with (default: globalThis.fetch). */
  fetch?: typeof globalThis.fetch;
  /** Headers sent on every call (credentials, a user agent); never stored. */
  headers?: HeaderValues;
  /** What a relative URL is resolved against. */
  baseUrl?: string | URL;
}

/** One call: fetch's RequestInit (but `method`), `json`, and the settings, which replace the
 * Actions' one by one. */
export interface CallOptions
  extends Omit<RequestInit, "method">,
    Omit<IdempotentOptions<WebInput>, "key" | "store"> {
  /** A body sent as JSON (Content-Type: application/json), named as a value. */
  json?: unknown;
  /** The call's key (explicit strategy): a string, or a function of its WebInput. */
  key?: string | ((input: WebInput) => string);
  /** Treat another method as a write (true) or a read (false). */
  sideEffect?: boolean;
  upstreamKey?: UpstreamKey;
}

/** idempotent()'s members that mean something for a request. */
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
]);

export interface Split {
  /** What fetch is given (RequestInit), the body still to be made from `json`. */
  readonly init: RequestInit;
  readonly json: unknown;
  readonly hasJson: boolean;
  /** The settings the call gives of its own. */
  readonly members: Record<string, unknown>;
  readonly sideEffect: boolean | undefined;
  readonly upstreamKey: unknown;
}

export function split(options: CallOptions): Split {
  const init: Record<string, unknown> = {};
  const members: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined || name === "json" || name === "sideEffect" || name === "upstreamKey") continue;
    if (name === "method") {
      throw new InvalidArgument("a call's method is its function's", {
        hint: 'api.post(url, ...), or api.request("POST", url, ...)',
      });
    }
    if (MEMBERS.has(name)) members[name] = value;
    else init[name] = value;
  }
  const hasJson = options.json !== undefined;
  if (hasJson && init["body"] !== undefined && init["body"] !== null) {
    throw new InvalidArgument("give json or body, not both");
  }
  return {
    init,
    json: options.json,
    hasJson,
    members,
    sideEffect: options.sideEffect,
    upstreamKey: options.upstreamKey,
  };
}

/** An Actions' settings (the members a write is deduplicated by, and upstreamKey), apart
 * from the rest (store, fetch, headers, baseUrl). */
export function defaultsOf(options: ActionsOptions): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (name === "key") {
      throw new InvalidArgument("key names one call; an Actions cannot give it to every call", {
        hint: 'give it to the call: api.post(url, { key: "order-42" })',
      });
    }
    if (MEMBERS.has(name) || name === "upstreamKey") out[name] = value;
  }
  upstreamOf(options.upstreamKey);
  return out;
}

/** Which key goes upstream: the record's uuid (default) or the call's key. */
export function upstreamOf(value: unknown): UpstreamKey {
  if (value === undefined || value === null) return "record";
  if (value === "record" || value === "call") return value;
  throw new InvalidArgument('upstreamKey must be "record" or "call"', {
    detail: `upstreamKey is ${typeof value === "string" ? JSON.stringify(value) : typeof value}.`,
    hint:
      '"record" (the default) sends the record\'s uuid, the same on every attempt and unique ' +
      'per scope and key; "call" sends the call\'s own key',
  });
}
