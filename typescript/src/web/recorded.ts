/**
 * What is recorded of an answer, and how a record is given back: `{ status: 201, body: ... }`
 * (the body's JSON, else its text, then marked `text: true`); never its headers, which may
 * carry a session. The Python package's shape, so that either language replays the other's
 * calls. A status other than 2xx is a StatusError.
 */

/** What a deduplicated call's response says of its record (`callInfo(response)`). */
export interface CallInfo {
  /** The record's scope. */
  readonly scope: string;
  /** The record's key (under the uuid strategy, the call's fresh key). */
  readonly key: string;
  /** The Idempotency-Key this attempt sent (undefined: a replay, or a read). */
  readonly upstreamKey: string | undefined;
  /** The response is the record's: nothing was sent. */
  readonly replayed: boolean;
}

const INFO = new WeakMap<Response, CallInfo>();

/** The record a response of Actions belongs to (undefined: a call not deduplicated). */
export function callInfo(response: Response): CallInfo | undefined {
  return INFO.get(response);
}

export function tag(response: Response, info: CallInfo): Response {
  INFO.set(response, info);
  return response;
}

/** A recorded answer. */
export interface RecordedResponse {
  status: number;
  body: unknown;
  text?: true;
}

/** The answer as it is recorded (a success) or remembered (a failure, cacheFailures). */
export function recordOf(status: number, text: string): RecordedResponse {
  try {
    // JSON.parse refuses NaN and Infinity, as the Python package's parse does.
    return { status, body: JSON.parse(text) as unknown };
  } catch {
    return { status, body: text, text: true };
  }
}

/** Statuses whose response has no body (the Response constructor refuses one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/** A response rebuilt from a record; a record that is not `{ status, body }` (another
 * client's, or a reconcile read's finding) is a 200 with that JSON. */
export function responseOf(record: unknown, info: CallInfo): Response {
  let status = 200;
  let body: unknown = record;
  let text = false;
  if (typeof record === "object" && record !== null && !Array.isArray(record)) {
    const r = record as Record<string, unknown>;
    const s = r["status"];
    if (typeof s === "number" && Number.isInteger(s) && s >= 200 && s <= 599 && "body" in r) {
      status = s;
      body = r["body"];
      text = r["text"] === true && typeof body === "string";
    }
  }
  const response = NULL_BODY.has(status)
    ? new Response(null, { status })
    : text
      ? new Response(body as string, { status, headers: { "content-type": "text/plain; charset=utf-8" } })
      : new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
  return tag(response, info);
}

export interface StatusErrorOptions {
  /** The request carried Idempotency-Key. */
  keyed?: boolean;
  /** A remembered failure: the provider was not called. */
  replayed?: boolean;
  /** What is remembered of it (cacheFailures): `{ status, body }`. */
  recorded: RecordedResponse;
}

/**
 * The provider answered with a status other than 2xx. `response` is the answer (rebuilt
 * from the record when `replayed`; its body is unread, and `recordedResponse.body` holds it
 * already).
 *
 * - `retryable`: another attempt may get another answer: a 5xx, a 429, or a 409 to a
 *   request that carried Idempotency-Key (the provider still runs that key)
 * - `retryAfterMs`: the provider's Retry-After (seconds or an HTTP date) on a retryable
 *   answer, else undefined
 * - `replayed`: a remembered failure (cacheFailures); the provider was not called
 */
export class StatusError extends Error {
  readonly response: Response;
  readonly method: string;
  readonly url: string;
  readonly status: number;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly replayed: boolean;
  /** What the core remembers of it under cacheFailures (the Python package's and the Rust
   * client's shape). */
  readonly recordedResponse: RecordedResponse;
  /** Read by the core: a 409 to the record's key leaves the claim to lapse. */
  leavesClaim = false;

  constructor(method: string, url: string, response: Response, options: StatusErrorOptions) {
    const status = response.status;
    const replayed = options.replayed ?? false;
    const retryable = !replayed && (status >= 500 || status === 429 || (options.keyed === true && status === 409));
    const after = retryable ? retryAfterMs(response.headers.get("retry-after")) : undefined;
    let said = `${method} ${url} answered ${status}${response.statusText ? ` ${response.statusText}` : ""}`;
    if (replayed) said += " (remembered: the provider was not called again)";
    else if (retryable) said += after !== undefined ? ` (worth retrying after ${after / 1000} s)` : " (worth retrying)";
    super(said);
    this.name = "StatusError";
    this.response = response;
    this.method = method;
    this.url = url;
    this.status = status;
    this.retryable = retryable;
    this.retryAfterMs = after;
    this.replayed = replayed;
    this.recordedResponse = options.recorded;
  }
}

/** Retry-After (RFC 9110, 10.2.3): seconds, or an HTTP date (a past one is no wait);
 * anything else is no advice. */
export function retryAfterMs(value: string | null): number | undefined {
  const v = (value ?? "").trim();
  if (/^\d+$/.test(v)) return Math.min(Number(v), 1e9) * 1000;
  if (v === "" || !/[a-z]/i.test(v)) return undefined;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(at - Date.now(), 0);
}
