/**
 * Extends a claim's lease every third of it while the function runs, and tells the Lease
 * when the store refuses (lost) or cannot be reached until the lease ends (unconfirmed).
 * One timer, set at the claim for the first extension (most calls end before it is due, and
 * cost nothing more), and unref()ed: a heartbeat alone never keeps the process alive.
 */

import type { Begin } from "./answers.js";
import type { Lease } from "./context.js";
import { LeaseLost } from "./errors.js";
import type { Store } from "./store.js";

export const now = (): number => performance.now();

export class Heartbeat {
  /** When the lease ends, as this process last confirmed it (performance.now()). */
  leaseEnd: number;
  private readonly every: number;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly store: Store,
    private readonly claim: Begin,
    private readonly scope: string,
    private readonly leaseMs: number,
    private readonly lease: Lease,
    /** The lease each extension asks for (ms; null: the policy's). */
    private readonly extendByMs: number | null,
  ) {
    this.every = Math.max(leaseMs / 3, 10);
    this.leaseEnd = now() + leaseMs;
    this.timer = setTimeout(() => void this.beat(), this.every).unref();
  }

  private async beat(): Promise<void> {
    if (this.stopped || this.claim.fence === null) return;
    try {
      await this.store.extend(this.scope, this.claim.key, this.claim.fence, this.extendByMs);
      this.leaseEnd = now() + this.leaseMs;
      this.lease.heldAgain();
    } catch (e) {
      if (e instanceof LeaseLost) {
        this.lease.lose("lost");
        return;
      }
      // Any other failure (the store out of reach) leaves the lease held while it runs.
      if (now() >= this.leaseEnd) this.lease.lose("unconfirmed");
    }
    // stop() may have run during the await.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
    if (!this.stopped) this.timer = setTimeout(() => void this.beat(), this.every).unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
