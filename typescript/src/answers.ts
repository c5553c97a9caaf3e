/**
 * What the store's calls answer: plain objects, the same for every driver. A driver hands
 * rows over as its library decodes them (a bigint as text or a number, a timestamp as a
 * Date or text); the readers here accept either.
 */

import type { IdempotencyError } from "./errors.js";
import { loads } from "./sql.js";

/** idem_begin's outcome, in TypeScript's words (the server's `in_progress` is `inProgress`). */
export type Outcome = "claimed" | "replay" | "inProgress";

/** A record's state (`inProgress` is the server's `in_progress`). */
export type RecordState = "inProgress" | "succeeded" | "failed";

/** What a completion leaves: `absent` when an uncached failure removed the record. */
export type CompleteState = "succeeded" | "failed" | "absent";

/**
 * idem_begin's answer. `fence` is set only when claimed (a duplicate never learns the
 * holder's token); `response` and `succeeded` only on a replay; `retryAfterMs` only while
 * in progress. `key` is the call's key (derived by the server under hashInput).
 */
export interface Begin {
  readonly outcome: Outcome;
  readonly key: string;
  readonly fence: number | null;
  readonly attempt: number;
  /** An earlier attempt's lease lapsed before it recorded anything: it may have acted. */
  readonly recovered: boolean;
  /** The same on every attempt of the call: send it upstream as Idempotency-Key. */
  readonly upstreamKey: string | null;
  readonly succeeded: boolean | null;
  readonly response: unknown;
  readonly leaseUntil: Date | null;
  readonly expiresAt: Date | null;
  readonly retryAfterMs: number | null;
  /** The lease left when the server answered (claimed calls), by the server's clock. */
  readonly leaseLeftMs: number | null;
}

/**
 * idem_lookup's row: the record of a call until it expires. (Not named `Record`, which is
 * TypeScript's own utility type.)
 */
export interface CallRecord {
  readonly state: RecordState;
  readonly fence: number;
  readonly attempt: number;
  readonly upstreamKey: string;
  readonly response: unknown;
  readonly createdAt: Date;
  readonly completedAt: Date | null;
  readonly leaseUntil: Date | null;
  readonly expiresAt: Date;
}

/**
 * One item of a batch claim: its key (null or absent: derived from `request`, hashInput),
 * its request (fingerprinted), and its claim token (repeat a batch whose answer was lost).
 */
export interface BatchItem {
  readonly key?: string | null;
  readonly request?: unknown;
  readonly claimToken?: string | null;
}

/** One item of a batch completion: the claim's key and fence, and what to record. */
export interface BatchCompletion {
  readonly key: string;
  readonly fence: number;
  readonly response: unknown;
  readonly succeeded?: boolean;
  readonly cacheFailure?: boolean | null;
}

/** An item's answer: its Begin, or its refusal (Mismatch, RepeatRefused) as a value. */
export type BatchBegin = Begin | IdempotencyError;

/** A row as a driver gives it: its columns in the statement's order. */
export type Row = readonly unknown[];

export function int(value: unknown): number {
  const n = typeof value === "number" ? value : Number(value);
  if (!Number.isSafeInteger(n)) throw new TypeError(`not an integer the package can hold: ${String(value)}`);
  return n;
}

export function intOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : int(value);
}

function floatOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}

function boolOrNull(value: unknown): boolean | null {
  if (value === null || value === undefined) return null;
  if (typeof value === "boolean") return value;
  return value === "t" || value === "true";
}

/** A column's text, whatever the driver made of it. */
function text(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return value.toString();
  return JSON.stringify(value);
}

function timeOrNull(value: unknown): Date | null {
  if (value === null || value === undefined) return null;
  return value instanceof Date ? value : new Date(text(value));
}

function textOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : text(value);
}

/** The server's `in_progress` in TypeScript's words; the other words are the same. */
function word(value: unknown): string {
  return value === "in_progress" ? "inProgress" : text(value);
}

const msOrNull = (secs: unknown): number | null => {
  const s = floatOrNull(secs);
  return s === null ? null : s * 1000;
};

/** idem_begin's row: outcome, fence, attempt, recovered, upstream_key, succeeded, response,
 * lease_until, expires_at, retry_after (s), key, lease left (s). */
export function beginOf(row: Row): Begin {
  return {
    outcome: word(row[0]) as Outcome,
    fence: intOrNull(row[1]),
    attempt: int(row[2]),
    recovered: boolOrNull(row[3]) ?? false,
    upstreamKey: textOrNull(row[4]),
    succeeded: boolOrNull(row[5]),
    response: loads(row[6]),
    leaseUntil: timeOrNull(row[7]),
    expiresAt: timeOrNull(row[8]),
    retryAfterMs: msOrNull(row[9]),
    key: text(row[10]),
    leaseLeftMs: msOrNull(row[11]),
  };
}

/** idem_lookup's row. */
export function recordOf(row: Row): CallRecord {
  return {
    state: word(row[0]) as RecordState,
    fence: int(row[1]),
    attempt: int(row[2]),
    upstreamKey: text(row[3]),
    response: loads(row[4]),
    createdAt: timeOrNull(row[5]) ?? new Date(NaN),
    completedAt: timeOrNull(row[6]),
    leaseUntil: timeOrNull(row[7]),
    expiresAt: timeOrNull(row[8]) ?? new Date(NaN),
  };
}

export function stateOf(value: unknown): CompleteState {
  return text(value) as CompleteState;
}

export function boolOf(value: unknown): boolean {
  return boolOrNull(value) ?? false;
}

export function timeOf(value: unknown): Date | null {
  return timeOrNull(value);
}
