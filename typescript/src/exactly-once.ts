/**
 * Exactly-once calls (`idempotent(fn, { transaction: (client, ...) => client })`): the
 * claim, the function's own writes and the completion in one transaction on the caller's
 * client, as the Python package's exactly_once (_exactly_once.py) and the Rust client's
 * ExactlyOnce (docs/client.md, "Exactly-once tools"). A crash or rollback before the commit
 * leaves nothing; a duplicate in another transaction waits on the call's row (READ
 * COMMITTED) and then replays, or fails with Contention (REPEATABLE READ: retry it). No
 * heartbeat: an uncommitted claim cannot be taken over.
 */

import { unknownOutcome } from "./call.js";
import type { Body } from "./call.js";
import { CURRENT } from "./context.js";
import { InvalidArgument, OutcomeUnknown } from "./errors.js";
import { NOT_FOUND } from "./options.js";
import { answer, contextOf, failureResponse } from "./plan.js";
import type { Plan } from "./plan.js";
import { dumps } from "./sql.js";
import { Store } from "./store.js";

/** A serialization failure or a deadlock, raised by the function's own statements. */
const TRANSACTIONS = new Set(["40001", "40P01"]);

/**
 * Whether the function failed because its transaction did (a serialization failure or a
 * deadlock): never remembered, whatever cacheFailures says; the caller retries the
 * transaction, which runs the call again. The driver's error (`code`) or the package's
 * (`sqlstate`) may be wrapped in a `cause`.
 */
function theTransactions(e: unknown): boolean {
  let cur: unknown = e;
  for (let i = 0; i < 4 && typeof cur === "object" && cur !== null; i++) {
    const { code, sqlstate, cause } = cur as { code?: unknown; sqlstate?: unknown; cause?: unknown };
    if (TRANSACTIONS.has(String(sqlstate)) || TRANSACTIONS.has(String(code))) return true;
    cur = cause;
  }
  return false;
}

/** The store over the client `transaction` picked, with the function's store's schema and
 * prepare setting. */
export function transactionStore(client: unknown, like: { schema: string; prepare: boolean }): Store {
  if (client === null || (typeof client !== "object" && typeof client !== "function")) {
    throw new InvalidArgument("transaction must answer the client the function writes with", {
      detail: `It answered ${client === null ? "null" : typeof client}.`,
      hint: "a pg Client or PoolClient, or the tx of postgres.js's sql.begin(async (tx) => ...)",
    });
  }
  return new Store(client as never, { schema: like.schema, prepare: like.prepare });
}

/** A failure as it is remembered; what is not JSON is remembered by its class. */
function storable(e: unknown): unknown {
  const response = failureResponse(e);
  try {
    dumps(response);
    return response;
  } catch {
    const type = e instanceof Error ? e.name : typeof e;
    return { error: type, type };
  }
}

export async function runExactlyOnce(store: Store, plan: Plan, body: Body): Promise<unknown> {
  let failure: { error: unknown } | undefined;
  let refused: OutcomeUnknown | undefined;
  let result: unknown;
  // Our block: a transaction of its own on an idle client, a savepoint inside the caller's.
  // A refusal thrown in it (a mismatch, a result that is not JSON) undoes all of it.
  const early = await store.transaction(async (tx): Promise<{ value: unknown } | undefined> => {
    const claim = await tx.claim(plan.scope, plan.key, plan.requestJson, plan.sent);
    if (claim.outcome !== "claimed") return { value: answer(claim) };
    const fence = claim.fence;
    if (fence === null) throw new TypeError("a claim without a fence");
    const ctx = contextOf(plan, claim);
    let found: unknown = NOT_FOUND;
    if (claim.recovered) {
      // A claim committed without its completion (its transaction committed after the
      // function failed to finish): the earlier attempt may have acted.
      try {
        found = await unknownOutcome(tx, plan, claim, fence);
      } catch (e) {
        if (!(e instanceof OutcomeUnknown)) throw e;
        refused = e; // its mark is kept: it commits with the transaction
      }
    }
    if (found !== NOT_FOUND) return { value: found };
    if (refused !== undefined) return undefined;
    try {
      // The function's writes in a savepoint: a failure undoes them and keeps the claim, so
      // that the failure can be remembered (cacheFailures).
      result = await tx.transaction(() => Promise.resolve(CURRENT.run(ctx, body)));
    } catch (e) {
      failure = { error: e };
    }
    if (failure === undefined) {
      await tx.completeJson(plan.scope, claim.key, fence, dumps(result));
    } else if (theTransactions(failure.error)) {
      throw failure.error; // nothing of the call is kept
    } else {
      // Kept (cacheFailures) or released by the server, in this transaction.
      await tx.complete(plan.scope, claim.key, fence, storable(failure.error), {
        succeeded: false,
        cacheFailure: plan.settings.cacheFailures,
      });
    }
    return undefined;
  });
  if (early !== undefined) return early.value;
  if (refused !== undefined) throw refused;
  if (failure !== undefined) throw failure.error;
  return result;
}
