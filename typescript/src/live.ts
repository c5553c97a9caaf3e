/**
 * The calls this process is holding (a claimed call whose result is not recorded yet), so
 * that a retry in the same process joins its holder instead of asking the store: without
 * it, a store down for longer than the lease came back with the lease lapsed, and the retry
 * took the call over and ran it a second time while the holder still held the first run's
 * result (docs/client.md, "A retry in the holder's process").
 */

const NOT_YET: unique symbol = Symbol("not yet");

interface Signal {
  readonly promise: Promise<void>;
  resolve(): void;
}

function signal(): Signal {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/**
 * One held call. `result` is the function's (set once it returned); `done` is marked when
 * the result is recorded, or the holder gave the call up (`recorded` says which). The
 * promises a retry waits on are made only when one asks (most calls have no such retry).
 */
export class Holding {
  result: unknown = NOT_YET;
  failed = false;
  recorded = false;
  /** The recording went on in the background after the caller was answered. */
  background = false;
  private ranMarked = false;
  private doneMarked = false;
  private ranSignal: Signal | undefined;
  private doneSignal: Signal | undefined;

  get hasResult(): boolean {
    return this.result !== NOT_YET;
  }

  get isRan(): boolean {
    return this.ranMarked;
  }

  /** Resolved once the function returned or threw. */
  get ran(): Promise<void> {
    if (this.ranMarked) return Promise.resolve();
    this.ranSignal ??= signal();
    return this.ranSignal.promise;
  }

  /** Resolved once the result is recorded, or the holder gave the call up. */
  get done(): Promise<void> {
    if (this.doneMarked) return Promise.resolve();
    this.doneSignal ??= signal();
    return this.doneSignal.promise;
  }

  markRan(): void {
    this.ranMarked = true;
    this.ranSignal?.resolve();
  }

  markDone(): void {
    this.doneMarked = true;
    this.doneSignal?.resolve();
  }
}

/** The held calls by store (its identity: the pool or connection), then by schema, scope
 * and name. */
class LiveHolders {
  private readonly calls = new WeakMap<object, Map<string, Holding>>();
  private readonly scopes = new WeakMap<object, Map<string, number>>();

  anyIn(store: object, scope: string): boolean {
    return this.scopes.get(store)?.has(scope) ?? false;
  }

  get(store: object, scope: string, name: string): Holding | undefined {
    return this.calls.get(store)?.get(`${scope}\0${name}`);
  }

  add(store: object, scope: string, names: readonly string[]): Holding {
    const holding = new Holding();
    let calls = this.calls.get(store);
    if (calls === undefined) this.calls.set(store, (calls = new Map<string, Holding>()));
    for (const name of names) calls.set(`${scope}\0${name}`, holding);
    let scopes = this.scopes.get(store);
    if (scopes === undefined) this.scopes.set(store, (scopes = new Map<string, number>()));
    scopes.set(scope, (scopes.get(scope) ?? 0) + names.length);
    return holding;
  }

  remove(store: object, scope: string, names: readonly string[], holding: Holding): void {
    const calls = this.calls.get(store);
    const scopes = this.scopes.get(store);
    if (calls === undefined || scopes === undefined) return;
    for (const name of names) {
      const id = `${scope}\0${name}`;
      if (calls.get(id) !== holding) continue;
      calls.delete(id);
      const left = (scopes.get(scope) ?? 1) - 1;
      if (left > 0) scopes.set(scope, left);
      else scopes.delete(scope);
    }
  }
}

export const LIVE = new LiveHolders();
