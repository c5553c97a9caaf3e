/**
 * What the running function can see of its call: `currentCall()` inside a wrapped function
 * (an AsyncLocalStorage, so that concurrent calls each see their own).
 */

import { AsyncLocalStorage } from "node:async_hooks";

import { LeaseLost } from "./errors.js";

export type LeaseState = "held" | "lost" | "unconfirmed";

/**
 * The claim's lease as the heartbeat knows it. `lost`: the store refused the heartbeat
 * (another attempt took the call over, or an operator forgot it); `unconfirmed`: the
 * heartbeat could not reach the store until the lease ended (another attempt may take the
 * call over now). A heartbeat that fails while the lease still runs is neither.
 */
export class Lease {
  private current: LeaseState = "held";
  private readonly controller = new AbortController();

  /** `held`, `lost` or `unconfirmed` (it may be held again after `unconfirmed`, when a
   * heartbeat gets through before another attempt took the call over). */
  get state(): LeaseState {
    return this.current;
  }

  /**
   * Aborted when the lease is lost or unconfirmed: give it to what the function awaits
   * (`fetch(url, { signal: currentCall().lease.signal })`). An AbortSignal stays aborted:
   * after `unconfirmed`, `state` tells whether the lease is held again.
   */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** @internal */
  lose(state: "lost" | "unconfirmed"): void {
    if (this.current !== "held") return;
    this.current = state;
    this.controller.abort(this.error());
  }

  /** @internal */
  heldAgain(): void {
    if (this.current === "unconfirmed") this.current = "held";
  }

  /**
   * Throw LeaseLost unless the lease is held: call it before an irreversible step. The call
   * is released, never remembered as failed: it did not run its effect.
   */
  ensure(): void {
    const e = this.error();
    if (e !== undefined) throw e;
  }

  private error(): LeaseLost | undefined {
    if (this.current === "lost") {
      return new LeaseLost("the lease is lost: another attempt holds the call", {
        detail: "The store refused the heartbeat: the call was taken over or forgotten.",
        hint: "stop before the effect; the attempt that holds the call records it",
      });
    }
    if (this.current === "unconfirmed") {
      return new LeaseLost("the lease is unconfirmed: the store could not be reached until it ended", {
        detail: "Another attempt may take the call over now.",
        hint: "stop before the effect; a retry takes the call over under its choice for an unknown outcome",
      });
    }
    return undefined;
  }
}

/** The call a wrapped function is running for. */
export interface CallContext<I = unknown> {
  /** The record's scope. */
  readonly scope: string;
  /** The record's key (the key as the server derived it, under hashInput). */
  readonly key: string;
  /** The claim's token (null for uuid calls, which claim nothing). */
  readonly fence: number | null;
  /** 1, then one more per takeover. */
  readonly attempt: number;
  /** An earlier attempt's lease lapsed before it recorded anything: it may have acted (the
   * function runs because onUnknownOutcome said rerun, or a reconcile read found nothing). */
  readonly recovered: boolean;
  /** The same on every attempt, a takeover included: send it upstream as Idempotency-Key
   * (the uuid strategy's fresh key). */
  readonly upstreamKey: string;
  /** Held, lost or unconfirmed: `currentCall().lease.ensure()` before an irreversible step. */
  readonly lease: Lease;
  /** The input the key was derived from. */
  readonly input: I;
}

/** @internal */
export const CURRENT = new AsyncLocalStorage<CallContext>();

/** The call being run. Throws outside a wrapped function. */
export function currentCall<I = unknown>(): CallContext<I> {
  const ctx = CURRENT.getStore();
  if (ctx === undefined) {
    throw new Error(
      "no idempotent call is running here: currentCall() is available inside a function " +
        "wrapped with idempotent()",
    );
  }
  return ctx as CallContext<I>;
}

/** The call being run, or undefined outside a wrapped function. */
export function maybeCurrentCall<I = unknown>(): CallContext<I> | undefined {
  return CURRENT.getStore() as CallContext<I> | undefined;
}
