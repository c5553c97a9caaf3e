/**
 * One web call: the request, whether and how it is deduplicated (a Plan of the core's), the
 * key it sends upstream, and what its answer becomes. The Python package's http/_call.py.
 *
 * The call's input (what hashInput hashes, what `fingerprint: "input"` compares, what
 * `keyFields` name) is `{ method, url, json | content }`: never its headers, nor the URL's
 * user and password. Its default scope is the method and the URL without its query
 * (`POST api.example.com/v1/emails`).
 */

import { createHash } from "node:crypto";

import { inputHash } from "../canonical.js";
import type { CallContext } from "../context.js";
import { InvalidArgument, LeaseLost, ToolFailed, Unrecorded } from "../errors.js";
import { settingsOf } from "../options.js";
import type { Settings } from "../options.js";
import { planOf, sentOf } from "../plan.js";
import type { Plan } from "../plan.js";
import { changesSomething } from "./methods.js";
import { split, upstreamOf } from "./options.js";
import type { CallOptions, HeaderValues, UpstreamKey, WebInput } from "./options.js";
import { recordOf, responseOf, StatusError, tag } from "./recorded.js";
import type { CallInfo, RecordedResponse } from "./recorded.js";

const MAX_SCOPE_BYTES = 128; // the server's pg_idempotency.max_scope_bytes
export const IDEMPOTENCY_KEY = "Idempotency-Key";

/** The codes (on a fetch error's cause, or on each error of an AggregateError cause) of a
 * request that never left: nothing was sent, so nothing can have acted. */
const NEVER_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "CERT_HAS_EXPIRED",
]);

export class WebCall {
  plan: Plan | null = null;
  scope = "";
  private ctx: CallContext | undefined;
  /** The key sent is the record's uuid, which a release would lose (the next claim mints
   * another). */
  private recordKeyed = false;
  private sentKey: string | undefined;
  readonly sent: Response[] = [];

  private constructor(
    readonly method: string,
    readonly url: URL,
    private readonly init: RequestInit & { headers: Headers },
    readonly changes: boolean,
    private readonly upstream: UpstreamKey,
  ) {}

  // -- before anything is sent

  static of(
    method: string,
    url: string | URL,
    options: CallOptions,
    defaults: Readonly<Record<string, unknown>>,
    base: { headers: HeaderValues | undefined; baseUrl: string | URL | undefined },
  ): WebCall {
    const given = split(options);
    method = method.toUpperCase();
    const changes = changesSomething(method, given.sideEffect);
    const upstream = upstreamOf(given.upstreamKey ?? defaults["upstreamKey"]);
    const target = new URL(url, base.baseUrl);
    const headers = new Headers(base.headers);
    new Headers(given.init.headers).forEach((value, name) => {
      headers.set(name, value);
    });
    if (headers.has(IDEMPOTENCY_KEY)) {
      throw new InvalidArgument("Idempotency-Key cannot be set as a header", {
        detail:
          'It is sent on POST, PUT, PATCH and DELETE: the record\'s uuid (or the call\'s key, upstreamKey: "call"), ' +
          "the same on every attempt of the call, a takeover included.",
        hint: "name the call with key instead (remove the header from the call's headers and the Actions')",
      });
    }
    const init: RequestInit & { headers: Headers } = { ...given.init, method, headers };
    if (given.hasJson) {
      init.body = JSON.stringify(given.json);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
    }
    const call = new WebCall(method, target, init, changes, upstream);
    // A read is deduplicated only by settings of its own (the Java framework's rule).
    if (Object.keys(given.members).length === 0 && !changes) return call;
    const settings = settingsFor({ ...withoutUpstream(defaults), ...given.members });
    if (settings.strategy === "none") return call;
    call.scope = settings.scope ?? defaultScope(method, target);
    const input = inputOf(method, target, given, init.body);
    call.plan = planOf(settings, call.scope, input, undefined, sentOf(settings));
    checkNameable(call.plan, input);
    if (upstream === "call" && call.plan.key !== null) headerKey(call.plan.key); // refused before anything is claimed
    return call;
  }

  // -- sending

  /** The request, with the key of this call's claim (or, under uuid, its fresh key). */
  request(ctx: CallContext | undefined): RequestInit {
    this.ctx = ctx;
    if (!this.changes || ctx === undefined) return this.init;
    this.recordKeyed = this.upstream === "record" && ctx.fence !== null;
    const key = this.upstream === "record" ? ctx.upstreamKey : ctx.key;
    this.sentKey = key;
    const headers = new Headers(this.init.headers);
    headers.set(IDEMPOTENCY_KEY, headerKey(key));
    return { ...this.init, headers };
  }

  /**
   * Sent under the record's key and no answer (a timeout, an abort, a connection broken
   * after the request went out): the provider may have acted. Released, the retry would
   * send a new key; left to lapse, the takeover keeps it. One that never left (refused,
   * no such host, a certificate refused) is released, as is an error that is not fetch's
   * own (a TypeError with a cause, an AbortError or a TimeoutError).
   */
  leftUnanswered(e: unknown): void {
    if (this.recordKeyed && mayHaveLeft(e)) markLeavesClaim(e);
  }

  /** What the core records of a 2xx answer; any other throws StatusError (a 409 to the
   * record's key is left to lapse: the provider still runs an earlier request). */
  async recorded(response: Response): Promise<RecordedResponse> {
    let text: string;
    try {
      // A clone's body: the caller gets the response with its own body unread.
      text = await response.clone().text();
    } catch (e) {
      if (this.recordKeyed) markLeavesClaim(e); // answered, then cut: the provider acted
      throw e;
    }
    this.sent.push(response);
    const record = recordOf(response.status, text);
    if (response.ok) return record;
    const failed = new StatusError(this.method, this.url.href, response, {
      keyed: this.sentKey !== undefined,
      recorded: record,
    });
    failed.leavesClaim = this.recordKeyed && response.status === 409;
    throw failed;
  }

  // -- the answer

  /** A call that is not deduplicated: its answer as it came, or StatusError. */
  async plain(response: Response): Promise<Response> {
    try {
      await this.recorded(response);
    } finally {
      if (this.ctx !== undefined) tag(response, this.info(false)); // uuid: the fresh key it sent
    }
    return response;
  }

  /** The response sent (this attempt ran), or the record's (a replay). */
  answer(result: unknown): Response {
    const last = this.sent.at(-1);
    if (last !== undefined) return tag(last, this.info(false));
    return responseOf(result, this.info(true));
  }

  /** The error the caller gets: a remembered status as StatusError (replayed), the
   * response this attempt got in an Unrecorded or LeaseLost, else `e` itself. */
  failed(e: unknown): unknown {
    if (e instanceof ToolFailed && isRecorded(e.response)) {
      const rebuilt = responseOf(e.response, this.info(true));
      const error = new StatusError(this.method, this.url.href, rebuilt, { replayed: true, recorded: e.response });
      error.cause = e;
      return error;
    }
    const last = this.sent.at(-1);
    if (last !== undefined && (e instanceof Unrecorded || e instanceof LeaseLost)) {
      // The error's response is the record's value; the caller gets the Response itself.
      const options = { detail: e.detail, hint: e.hint, sqlstate: e.sqlstate, response: last, cause: e };
      return e instanceof Unrecorded
        ? new Unrecorded(e.message, { ...options, replayed: e.replayed })
        : new LeaseLost(e.message, options);
    }
    if (e instanceof StatusError) tag(e.response, this.info(false));
    return e;
  }

  private info(replayed: boolean): CallInfo {
    const ctx = replayed ? undefined : this.ctx;
    // A replay: its own key, or the server's hash of its input (hashInput).
    const key = ctx !== undefined ? ctx.key : (this.plan?.key ?? inputHash(this.plan?.input));
    const sent = replayed || this.sent.length === 0 ? undefined : this.sentKey;
    return { scope: this.scope, key, upstreamKey: sent, replayed };
  }
}

function withoutUpstream(defaults: Readonly<Record<string, unknown>>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(defaults).filter(([name]) => name !== "upstreamKey"));
}

function settingsFor(members: Record<string, unknown>): Settings {
  const key = members["key"];
  if (typeof key === "string") members["key"] = () => key;
  return settingsOf(members);
}

function isRecorded(value: unknown): value is RecordedResponse {
  return (
    typeof value === "object" &&
    value !== null &&
    Number.isInteger((value as { status?: unknown }).status) &&
    "body" in value
  );
}

function codesOf(e: unknown, depth = 0): string[] {
  if (typeof e !== "object" || e === null || depth > 4) return [];
  const err = e as { code?: unknown; cause?: unknown; errors?: unknown };
  const codes = typeof err.code === "string" ? [err.code] : [];
  if (Array.isArray(err.errors)) for (const inner of err.errors) codes.push(...codesOf(inner, depth + 1));
  return [...codes, ...codesOf(err.cause, depth + 1)];
}

function mayHaveLeft(e: unknown): boolean {
  if (e instanceof Error && (e.name === "AbortError" || e.name === "TimeoutError")) return true;
  // fetch's network errors are TypeError("fetch failed", { cause }); one without a cause was
  // refused before anything was sent (a bad header, a URL with a password).
  if (!(e instanceof TypeError) || e.cause === undefined) return false;
  const codes = codesOf(e.cause);
  return codes.length === 0 || !codes.every((c) => NEVER_SENT.has(c));
}

function markLeavesClaim(e: unknown): void {
  if (typeof e === "object" && e !== null) (e as { leavesClaim?: boolean }).leavesClaim = true; // read by the core
}

/** `POST api.example.com/v1/emails`; past 128 bytes, cut and ended by a hash of the whole,
 * so that two long endpoints stay two scopes. The Python package's, character for character
 * (a WHATWG URL's host and path are ASCII, as httpx's). */
export function defaultScope(method: string, url: URL): string {
  const scope = `${method} ${url.host}${url.pathname}`;
  if (Buffer.byteLength(scope) <= MAX_SCOPE_BYTES) return scope;
  const digest = createHash("sha256").update(scope).digest("hex").slice(0, 16);
  return `${scope.slice(0, MAX_SCOPE_BYTES - 17)}~${digest}`;
}

type Input = { method: string; url: string; json?: unknown; content?: Exclude<WebInput["content"], undefined>; streamed?: true };

/** What names the call: its method, its URL (query included), its body; not its headers,
 * nor the URL's user and password. */
function inputOf(method: string, url: URL, given: { hasJson: boolean; json: unknown }, body: unknown): WebInput {
  const out: Input = { method, url: `${url.protocol}//${url.host}${url.pathname}${url.search}` };
  if (given.hasJson) {
    out.json = given.json; // as a value: spelling and member order do not matter
    return out;
  }
  let bytes: Uint8Array | undefined;
  if (typeof body === "string") bytes = Buffer.from(body, "utf8");
  else if (body instanceof URLSearchParams) bytes = Buffer.from(body.toString(), "utf8");
  else if (body instanceof ArrayBuffer) bytes = new Uint8Array(body);
  else if (ArrayBuffer.isView(body)) bytes = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  else if (body !== undefined && body !== null) {
    // A Blob, FormData or stream: only a key of the caller's names it.
    out.content = null;
    out.streamed = true;
    return out;
  }
  if (bytes !== undefined && bytes.length > 0) {
    try {
      out.content = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      out.content = { sha256: createHash("sha256").update(bytes).digest("hex") };
    }
  }
  return out;
}

/** A streamed or multipart body (its boundary is new each time) cannot name the call. */
function checkNameable(plan: Plan, input: Input): void {
  if (input.streamed !== true) return;
  if (plan.strategy === "hashInput" || plan.settings.fingerprint === "input") {
    throw new InvalidArgument("a streamed or multipart body cannot name the call", {
      detail:
        "Its bytes are not known before it is sent (a multipart boundary is new each time), " +
        "so a retry would not be recognised.",
      hint: 'give the call its key: key: "order-42", or keyFields: ["url"]',
    });
  }
}

/** The key as an Idempotency-Key value: a control character, or a space or tab at either
 * end (which receivers strip, so " o-1" and "o-1" would be one key upstream), is refused.
 * Sent as its UTF-8 bytes, as the Python package sends it (fetch takes header values as
 * bytes, one per character). */
function headerKey(key: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what is refused
  if (/^[ \t]|[ \t]$|[\u0000-\u001f\u007f]/.test(key)) {
    throw new InvalidArgument("the key cannot be sent as Idempotency-Key", {
      detail: "It holds a control character, or a space or tab at either end.",
      hint: 'use upstreamKey: "record" (the default) to send the record\'s uuid, or a key without them',
    });
  }
  return Buffer.from(key, "utf8").toString("latin1");
}
