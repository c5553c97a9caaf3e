/**
 * A wrapped function's call: claim, run while a heartbeat keeps the lease, record under the
 * fence (retried while the store is out of reach), or replay. The Python package's
 * _async_call.py: a retry in this process joins the call's holder (live.ts), and a result is
 * never thrown away.
 */

import type { Begin } from "./answers.js";
import { CURRENT } from "./context.js";
import type { CallContext } from "./context.js";
import {
  Contention,
  IdempotencyError,
  InProgress,
  InvalidArgument,
  LeaseLost,
  OutcomeUnknown,
  ResponseTooLarge,
  StoreUnavailable,
  Unrecorded,
} from "./errors.js";
import { Heartbeat, now } from "./heartbeat.js";
import { localName } from "./keys.js";
import { LIVE } from "./live.js";
import type { Holding } from "./live.js";
import { outcomeUnknown, unrecorded } from "./marks.js";
import { NOT_FOUND, UNKNOWN } from "./options.js";
import type { Reconcile } from "./options.js";
import {
  answer,
  contextOf,
  DEFAULT_LEASE_MS,
  failureResponse,
  leaseMsOf,
  leavesClaim,
  unknownOutcomeOf,
} from "./plan.js";
import type { Plan } from "./plan.js";
import { dumps } from "./sql.js";
import type { Store } from "./store.js";

/** The function being wrapped, called with its receiver and arguments. */
export type Body = () => unknown;

/** Errors after which the same statement may succeed: the store was out of reach, or busy. */
const transient = (e: unknown): boolean => e instanceof StoreUnavailable || e instanceof Contention;

/** The first pause between two tries of a statement; it doubles up to MAX_PAUSE_MS. */
const FIRST_PAUSE_MS = 20;
const MAX_PAUSE_MS = 1000;
/** How long a completion handed to the background keeps trying without a ttl set. */
const DEFAULT_TTL_MS = 3_600_000;

/** A pause the caller awaits: a timer that keeps the process alive, as the caller's await
 * means to. `keepAlive` false: a background retry's, which a process may exit during. */
function pause(ms: number, keepAlive = true): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (!keepAlive) t.unref();
  });
}

/** The name of the store's holders: its identity (the pool or connection), per schema. */
const scopeId = (store: Store, plan: Plan): string => `${store.schema}\0${plan.scope}`;

export async function run(store: Store, plan: Plan, body: Body): Promise<unknown> {
  const id = scopeId(store, plan);
  if (LIVE.anyIn(store.identity, id)) {
    const held = LIVE.get(store.identity, id, localName(plan.key, plan.requestJson));
    if (held !== undefined) await join(held, plan);
  }
  const claim = await store.claim(plan.scope, plan.key, plan.requestJson, plan.sent);
  if (claim.outcome !== "claimed") return answer(claim);
  return hold(store, plan, claim, body);
}

/** Wait up to `ms` for `promise`; true when it settled in time. */
async function within(promise: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => {
      resolve(false);
    }, ms);
  });
  try {
    return await Promise.race([promise.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A retry of a call this process holds: wait for the function (up to the call's `wait`),
 * then for its recording (up to the lease); the store then replays it. While the result is
 * not recorded yet, the retry is told so (Unrecorded, replayed) instead of taking the call
 * over.
 */
async function join(held: Holding, plan: Plan): Promise<void> {
  if (!held.isRan && !(await within(held.ran, (plan.settings.waitS ?? 0) * 1000))) {
    throw new InProgress("the call is running in this process", {
      hint: "give idempotent() a wait so that a duplicate waits for it",
    });
  }
  await within(held.done, plan.settings.leaseS !== null ? plan.settings.leaseS * 1000 : DEFAULT_LEASE_MS);
  if (!held.recorded && held.hasResult && !held.failed) {
    throw new Unrecorded("the call ran in this process, but its result is not recorded yet", {
      response: held.result,
      replayed: true,
      hint: "the store could not be reached; the holder keeps trying",
    });
  }
}

async function hold(store: Store, plan: Plan, claim: Begin, body: Body): Promise<unknown> {
  const fence = claim.fence;
  if (fence === null) throw new TypeError("a claim without a fence");
  const ctx = contextOf(plan, claim);
  const id = scopeId(store, plan);
  const names = [localName(claim.key, null)];
  if (plan.key === null && plan.requestJson !== null) names.push(localName(null, plan.requestJson));
  const holding = LIVE.add(store.identity, id, names);
  const beat = new Heartbeat(
    store,
    claim,
    plan.scope,
    leaseMsOf(plan, claim),
    ctx.lease,
    plan.settings.leaseS === null ? null : plan.settings.leaseS * 1000,
  );
  try {
    if (claim.recovered) {
      const found = await unknownOutcome(store, plan, claim, fence);
      if (found !== NOT_FOUND) {
        holding.result = found;
        holding.recorded = true;
        return found;
      }
    }
    let result: unknown;
    try {
      result = await CURRENT.run(ctx, body);
    } catch (e) {
      holding.failed = true;
      await recordFailure(store, plan, claim, fence, e, beat);
      throw e;
    }
    holding.result = result;
    holding.markRan();
    return await record(store, plan, claim, fence, ctx, result, beat, holding, () => {
      LIVE.remove(store.identity, id, names, holding);
    });
  } finally {
    holding.markRan();
    if (!holding.background) {
      beat.stop();
      holding.markDone();
      LIVE.remove(store.identity, id, names, holding);
    }
  }
}

/** A takeover (`recovered`): rerun, refuse, or ask the reconcile read. NOT_FOUND: run.
 * (exactly-once.ts asks it too, inside its transaction.) */
export async function unknownOutcome(store: Store, plan: Plan, claim: Begin, fence: number): Promise<unknown> {
  const choice = unknownOutcomeOf(plan);
  if (choice === "rerun") return NOT_FOUND;
  let why =
    `attempt ${claim.attempt} took the call over from one whose lease lapsed before it ` +
    "recorded an outcome, and the tool refuses to run again";
  if (typeof choice === "function") {
    let found: unknown;
    try {
      const call: Reconcile = {
        input: plan.input,
        scope: plan.scope,
        key: claim.key,
        upstreamKey: claim.upstreamKey ?? claim.key,
        attempt: claim.attempt,
      };
      found = await choice(call);
      if (found === UNKNOWN) {
        why = "an earlier attempt may have performed the effect, and the reconcile read could not tell";
      }
    } catch (e) {
      found = UNKNOWN;
      const message = e instanceof Error ? e.message : String(e);
      why = `an earlier attempt may have performed the effect, and the reconcile read failed: ${message}`;
    }
    if (found === NOT_FOUND) return NOT_FOUND;
    if (found !== UNKNOWN) {
      await store.complete(plan.scope, claim.key, fence, found);
      return found;
    }
  }
  await store.complete(plan.scope, claim.key, fence, outcomeUnknown(why));
  throw new OutcomeUnknown("an earlier attempt of this call may have acted, and the call is refused", {
    detail: why,
    hint: "an operator resolves it: SELECT * FROM idem_unresolved(), then idem_resolve",
  });
}

/** The function threw: remember the failure (the server keeps it or releases the claim, by
 * cacheFailures), or release a claim whose function stopped at a lost lease. Retried while
 * the lease lasts; the function's own error reaches the caller whatever becomes of this. */
async function recordFailure(
  store: Store,
  plan: Plan,
  claim: Begin,
  fence: number,
  e: unknown,
  beat: Heartbeat,
): Promise<void> {
  if (leavesClaim(e)) return;
  let delay = FIRST_PAUSE_MS;
  for (;;) {
    try {
      if (e instanceof LeaseLost) {
        await store.release(plan.scope, claim.key, fence);
      } else {
        let response = failureResponse(e);
        try {
          dumps(response);
        } catch {
          // What the error said to remember is not JSON: its class is remembered instead.
          const type = e instanceof Error ? e.name : typeof e;
          response = { error: type, type };
        }
        await store.complete(plan.scope, claim.key, fence, response, {
          succeeded: false,
          cacheFailure: plan.settings.cacheFailures,
        });
      }
      return;
    } catch (err) {
      if (!transient(err) || now() + delay >= beat.leaseEnd) return;
      await pause(delay);
      delay = Math.min(delay * 2, MAX_PAUSE_MS);
    }
  }
}

async function record(
  store: Store,
  plan: Plan,
  claim: Begin,
  fence: number,
  ctx: CallContext,
  result: unknown,
  beat: Heartbeat,
  holding: Holding,
  forget: () => void,
): Promise<unknown> {
  if (ctx.lease.state === "lost") {
    throw new LeaseLost("the lease was lost while the call ran: its result is not recorded", {
      detail: "Another attempt took the call over, or it was forgotten.",
      response: result,
    });
  }
  let response: string;
  try {
    response = dumps(result);
  } catch (e) {
    if (!(e instanceof InvalidArgument)) throw e;
    await completeMark(store, plan, claim, fence, e.detail ?? e.message);
    holding.recorded = true;
    throw new Unrecorded("the call ran, but its result cannot be stored", {
      detail: e.detail,
      hint: e.hint,
      response: result,
      cause: e,
    });
  }
  if (await complete(store, plan, claim, fence, response, beat.leaseEnd, result, true)) {
    holding.recorded = true;
    return result;
  }
  // Not recorded within the lease: keep trying in the background until the ttl, and tell
  // the caller now. A retry in this process joins the holder meanwhile.
  holding.background = true;
  const until = now() + (plan.settings.ttlS !== null ? plan.settings.ttlS * 1000 : DEFAULT_TTL_MS);
  void complete(store, plan, claim, fence, response, until, result, false)
    .then(
      (recorded) => {
        holding.recorded = recorded;
      },
      () => undefined, // taken over, or marked: nothing more to record, nobody to tell
    )
    .finally(() => {
      beat.stop();
      holding.markDone();
      forget();
    });
  const state =
    ctx.lease.state === "held"
      ? "kept by the heartbeat"
      : "not renewed: once it lapses, another process may take the call over";
  throw new Unrecorded("the call ran, but the store could not record its result in time", {
    detail: `The store could not be reached. The lease is ${state}.`,
    hint: "the effect happened; this process keeps trying to record it, and a retry here waits for that",
    response: result,
  });
}

/** Complete under the fence, retrying while the store is out of reach, until `until`
 * (performance.now()); false when that passed. */
async function complete(
  store: Store,
  plan: Plan,
  claim: Begin,
  fence: number,
  response: string,
  until: number,
  result: unknown,
  keepAlive: boolean,
): Promise<boolean> {
  let delay = FIRST_PAUSE_MS;
  for (;;) {
    try {
      await store.completeJson(plan.scope, claim.key, fence, response);
      return true;
    } catch (e) {
      if (e instanceof LeaseLost) {
        throw new LeaseLost("the lease was lost while the call ran: its result is not recorded", {
          detail: e.detail,
          hint: e.hint,
          response: result,
          cause: e,
        });
      }
      if (e instanceof ResponseTooLarge) {
        await completeMark(store, plan, claim, fence, e.message);
        throw new Unrecorded("the call ran, but its result is too large to store", {
          detail: e.detail,
          hint: e.hint,
          response: result,
          cause: e,
        });
      }
      if (!transient(e) || now() + delay >= until) {
        if (transient(e)) return false;
        throw e;
      }
      await pause(delay, keepAlive);
      delay = Math.min(delay * 2, MAX_PAUSE_MS);
    }
  }
}

/** Record the mark of a result that cannot be kept, so that every retry is told. */
async function completeMark(store: Store, plan: Plan, claim: Begin, fence: number, why: string): Promise<void> {
  try {
    await store.complete(plan.scope, claim.key, fence, unrecorded(why));
  } catch (e) {
    if (!(e instanceof IdempotencyError)) throw e;
  }
}
