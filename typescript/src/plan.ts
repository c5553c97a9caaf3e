/**
 * One call's settings, key and request, and the answers that need no running (replays,
 * refusals): the Python package's _plan.py.
 */

import { randomUUID } from "node:crypto";

import type { Begin } from "./answers.js";
import { Lease } from "./context.js";
import type { CallContext } from "./context.js";
import { InProgress, OutcomeUnknown, ToolFailed, Unrecorded } from "./errors.js";
import { explicitKey, requestOf } from "./keys.js";
import { markOf } from "./marks.js";
import { serverWord } from "./options.js";
import type { KeyStrategy, Settings, UnknownOutcome } from "./options.js";
import { dumps, toJson } from "./sql.js";
import type { Sent } from "./store.js";

/** The server's pg_idempotency.default_lease, for the heartbeat's pace when the server did
 * not say how long the lease is. */
export const DEFAULT_LEASE_MS = 60_000;

export interface Plan {
  readonly settings: Settings;
  readonly strategy: KeyStrategy;
  readonly scope: string;
  /** The key (explicit, uuid), or null: derived by the server from the request. */
  readonly key: string | null;
  readonly requestJson: string | null;
  readonly input: unknown;
  /** What the call sends of its settings, made once per function. */
  readonly sent: Sent;
}

/** Only what is set, so that the scope's policy governs the rest. */
export function sentOf(s: Settings): Sent {
  return [
    s.ttlS,
    s.leaseS,
    serverWord(s.onCacheHit),
    serverWord(s.onMismatch),
    s.waitS,
    s.unresolvedTtlS,
  ];
}

export function planOf(settings: Settings, scope: string, input: unknown, receiver: unknown, sent: Sent): Plan {
  const strategy = settings.strategy;
  let key: string | null = null;
  if (strategy === "explicit") key = explicitKey(settings, input, receiver, scope);
  else if (strategy === "uuid") key = randomUUID();
  let requestJson: string | null = null;
  if (strategy === "hashInput" || strategy === "explicit") {
    const request = requestOf(settings, strategy, input);
    if (request !== undefined) requestJson = dumps(request);
  }
  return { settings, strategy, scope, key, requestJson, input, sent };
}

/** The lease's length for the heartbeat's pace: what the server said is left, else the
 * setting, else the server's default. */
export function leaseMsOf(plan: Plan, claim: Begin): number {
  if (claim.leaseLeftMs !== null && claim.leaseLeftMs > 0) return claim.leaseLeftMs;
  return plan.settings.leaseS !== null ? plan.settings.leaseS * 1000 : DEFAULT_LEASE_MS;
}

export function contextOf(plan: Plan, claim: Begin): CallContext {
  return {
    scope: plan.scope,
    key: claim.key,
    fence: claim.fence,
    attempt: claim.attempt,
    recovered: claim.recovered,
    upstreamKey: claim.upstreamKey ?? claim.key,
    lease: new Lease(),
    input: plan.input,
  };
}

export function uuidContextOf(plan: Plan): CallContext {
  const key = plan.key ?? randomUUID();
  return {
    scope: plan.scope,
    key,
    fence: null,
    attempt: 1,
    recovered: false,
    upstreamKey: key,
    lease: new Lease(),
    input: plan.input,
  };
}

export function unknownOutcomeOf(plan: Plan): UnknownOutcome {
  return plan.settings.onUnknownOutcome ?? "rerun";
}

/** A replay's value, or the error a replay or an in-progress answer is. */
export function answer(claim: Begin): unknown {
  if (claim.outcome === "inProgress") {
    throw new InProgress("the call is running elsewhere", {
      detail:
        claim.retryAfterMs !== null
          ? `Its lease ends in ${Math.ceil(claim.retryAfterMs)} ms at most.`
          : undefined,
      hint:
        "retry after retryAfterMs, or give idempotent() a wait so that a duplicate waits " +
        "for the first call's result",
      retryAfterMs: claim.retryAfterMs ?? undefined,
    });
  }
  const mark = markOf(claim.response);
  if (mark !== undefined) {
    const [kind, why] = mark;
    if (kind === "unrecorded") {
      throw new Unrecorded("the call ran, but its result could not be recorded", {
        detail: why,
        replayed: true,
        hint: "the effect happened; an operator's idem_forget lets the call run again",
      });
    }
    throw new OutcomeUnknown("an earlier attempt of this call may have acted, and the call is refused", {
      detail: why,
      hint: "an operator resolves it: SELECT * FROM idem_unresolved(), then idem_resolve",
    });
  }
  if (claim.succeeded === false) {
    const resp = claim.response;
    const message =
      typeof resp === "object" && resp !== null && "error" in resp
        ? resp.error
        : undefined;
    throw new ToolFailed(
      `the call failed before, and its failure is remembered: ${
        typeof message === "string" && message ? message : JSON.stringify(resp)
      }`,
      {
        response: resp,
        hint:
          'cacheFailures: true keeps a failure for its ttl; onCacheHit: "returnCachedIfSuccess" ' +
          "runs a failed call again",
      },
    );
  }
  return claim.response;
}

/** What is remembered of a failure: what the error says to remember (`recordedResponse`, a
 * web action's { status, body }), else its message and class (Python's type name). A value
 * thrown that is not an Error is remembered as its JSON (or its text) and its type. */
export function failureResponse(e: unknown): unknown {
  if (typeof e === "object" && e !== null) {
    const own = (e as { recordedResponse?: unknown }).recordedResponse;
    if (own !== undefined) return own;
  }
  let message: string;
  let type: string;
  if (e instanceof Error) {
    message = e.message || e.name;
    type = (e.constructor as { name?: string } | undefined)?.name || e.name;
  } else if (typeof e === "object" && e !== null) {
    message = jsonOrText(e);
    type = (e.constructor as { name?: string } | undefined)?.name || "Object";
  } else {
    message = typeof e === "string" ? e : jsonOrText(e);
    type = typeof e;
  }
  // U+0000 cannot be stored: a message holding it is kept with U+FFFD in its place.
  return { error: message.replaceAll("\0", "\uFFFD"), type };
}

function jsonOrText(value: unknown): string {
  try {
    return toJson(value) ?? typeof value;
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/**
 * A failure that may have had its effect (a request sent and never answered) is neither
 * remembered nor released: the claim lapses, and the attempt that takes it over keeps the
 * upstream key and decides by onUnknownOutcome (the Rust client's FailureRecord::Abandon).
 */
export function leavesClaim(e: unknown): boolean {
  return typeof e === "object" && e !== null && (e as { leavesClaim?: unknown }).leavesClaim === true;
}
