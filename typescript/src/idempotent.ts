/**
 * `idempotent(fn, options)`: the Java framework's `@Idempotent` for TypeScript functions,
 * over the SQL API. It returns a function of the same type; three calls with the same
 * input run `fn` once, and the repeats get its result back.
 *
 *     const sendEmail = idempotent(async function sendEmail(input: { to: string }) {
 *       return provider.send(input.to);
 *     }, { ttl: 86_400_000 });
 *
 * Methods take `@idempotent.method(options)`; a class takes `@idempotent.class(options)`,
 * whose options apply to its methods that have none of their own (TypeScript 5's standard
 * decorators). A function without it is not deduplicated: reads stay fresh.
 */

import { run } from "./call.js";
import { CURRENT } from "./context.js";
import type { StoreSource } from "./drivers/index.js";
import { InvalidArgument } from "./errors.js";
import { runExactlyOnce, transactionStore } from "./exactly-once.js";
import { inputOf, inputWithout } from "./keys.js";
import { settingsOf } from "./options.js";
import type { IdempotentOptions, Settings } from "./options.js";
import { planOf, sentOf, uuidContextOf } from "./plan.js";
import { Store } from "./store.js";
import type { StoreOptions } from "./store.js";

/** An async function: what idempotent() wraps. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the constraint every function type meets; no value is typed any
export type AsyncFunction = (...args: any[]) => Promise<unknown>;

/**
 * The input of a call of `F` (what hashInput hashes, what `key` and `keyFields` read): its
 * argument when it takes one, the array of its arguments when it takes several, `{}` when
 * it takes none.
 */
export type InputOf<F> = F extends (...args: infer P) => unknown
  ? // Arguments typed any (a function of any, or the constraint itself, which TypeScript
    // puts in F while it types a key function given beside a function expression): any.
    0 extends 1 & P[number]
    ? // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the function's own any
      any
    : P extends readonly []
    ? Record<string, never>
    : P extends readonly [infer A]
      ? A
      : P extends readonly [(infer A)?]
        ? A | Record<string, never>
        : P
  : never;

/** The store configure() set: a Store, or a connection string opened at the first call. */
const DEFAULT: { source: Store | StoreSource | null; options: StoreOptions; opened: Store | null } = {
  source: null,
  options: {},
  opened: null,
};

/**
 * Set the store every idempotent function without its own `store` uses: a Store, a
 * connection string (`"postgresql://app@db/app"`; a pool is opened at the first call), or a
 * node-postgres Pool. `options` apply to a store made here (`schema`, `prepare: false`
 * behind PgBouncer, `poolOptions`).
 */
export function configure(store: Store | StoreSource, options: StoreOptions = {}): void {
  // A store opened for an earlier connection string is left open, as the Python package
  // leaves it: calls under way may still be using it.
  DEFAULT.source = store;
  DEFAULT.options = options;
  DEFAULT.opened = store instanceof Store ? store : null;
}

/** @internal The store configure() set, opened at its first use (web actions use it too). */
export function defaultStore(): Store {
  if (DEFAULT.opened !== null) return DEFAULT.opened;
  if (DEFAULT.source === null) {
    throw new InvalidArgument("no store for idempotent()", {
      detail: "The function has no store option, and configure() was not called.",
      hint: 'call configure("postgresql://...") once at start-up, or give idempotent() a store',
    });
  }
  DEFAULT.opened = DEFAULT.source instanceof Store ? DEFAULT.source : new Store(DEFAULT.source, DEFAULT.options);
  return DEFAULT.opened;
}

/** @internal The store a configure() opened, closed (tests). */
export async function resetDefaultStore(): Promise<void> {
  const opened = DEFAULT.opened;
  const owned = opened !== null && !(DEFAULT.source instanceof Store);
  DEFAULT.source = null;
  DEFAULT.opened = null;
  DEFAULT.options = {};
  if (owned) await opened.close();
}

/** Marks a wrapped function (its settings), so that a class's settings skip it. */
const WRAPPED: unique symbol = Symbol("pg-idempotency.settings");

interface Wrapped {
  [WRAPPED]?: Settings;
}

/** The settings a wrapped function runs under (undefined: not deduplicated). */
export function settingsOfFunction(fn: unknown): Settings | undefined {
  return typeof fn === "function" ? (fn as Wrapped)[WRAPPED] : undefined;
}

function wrap<F extends AsyncFunction>(fn: F, settings: Settings, name: string | undefined): F {
  const given: unknown = fn; // a JavaScript caller's argument may be anything
  if (typeof given !== "function") {
    throw new InvalidArgument("idempotent() wraps functions", {
      detail: `It was given ${given === null ? "null" : typeof given}.`,
    });
  }
  if (settings.strategy === "none") {
    // No protection; still marked, so that a class's settings leave the method alone.
    const plain = function (this: unknown, ...args: unknown[]): unknown {
      return fn.apply(this, args);
    };
    return named(plain, fn, settings) as F;
  }
  const scope = settings.scope ?? name ?? fn.name;
  if (!scope) {
    throw new InvalidArgument("an anonymous function needs a scope", {
      detail: "The scope names the function's records; it defaults to the function's name.",
      hint: 'idempotent(async (input) => ..., { scope: "send_email" }), or name the function',
    });
  }
  const sent = sentOf(settings);
  const source = settings.store;
  // A connection string or a pool given as `store` is opened once, at the first call.
  let own: Store | null = source instanceof Store ? source : null;
  const storeOf = (): Store => {
    if (source === null) return defaultStore();
    own ??= new Store(source as StoreSource);
    return own;
  };

  // Exactly once: the schema and prepare setting of the store the function would use
  // otherwise (configure()'s, or its own), without opening it.
  const likeOf = (): { schema: string; prepare: boolean } => {
    const like = source instanceof Store ? source : source === null ? DEFAULT.opened : null;
    if (like !== null) return like;
    const options = source === null ? DEFAULT.options : {};
    return { schema: options.schema ?? "public", prepare: options.prepare ?? true };
  };
  const pick = settings.transaction;

  const wrapper = async function (this: unknown, ...args: unknown[]): Promise<unknown> {
    const body = (): unknown => fn.apply(this, args);
    if (pick !== null) {
      const client = pick.apply(this, args);
      const store = transactionStore(client, likeOf());
      return runExactlyOnce(store, planOf(settings, scope, inputWithout(fn, args, client), this, sent), body);
    }
    const plan = planOf(settings, scope, inputOf(fn, args), this, sent);
    if (plan.strategy === "uuid") return CURRENT.run(uuidContextOf(plan), body);
    return run(storeOf(), plan, body);
  };
  return named(wrapper, fn, settings) as F;
}

/** The wrapper keeps the function's name and length, and carries its settings. */
function named<W extends object>(wrapper: W, fn: AsyncFunction, settings: Settings): W {
  Object.defineProperty(wrapper, "name", { value: fn.name, configurable: true });
  Object.defineProperty(wrapper, "length", { value: fn.length, configurable: true });
  Object.defineProperty(wrapper, WRAPPED, { value: settings });
  return wrapper;
}

/** A method decorator (TypeScript 5's standard decorators). */
export type MethodDecorator = <This, F extends AsyncFunction>(
  value: F,
  context: ClassMethodDecoratorContext<This, F>,
) => F;

/** A class decorator (TypeScript 5's standard decorators). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the constraint every class type meets
export type ClassDecorator = <C extends abstract new (...args: any[]) => unknown>(
  value: C,
  context: ClassDecoratorContext<C>,
) => C;

export interface Idempotent {
  /**
   * Deduplicate `fn`'s calls: the first call with an input runs it, and its result is
   * remembered for `ttl`; a repeat gets the result back (the stored JSON value) without
   * running it. See IdempotentOptions for the members; an unset member is not sent, so the
   * scope's policy in the database governs it.
   */
  <F extends AsyncFunction>(fn: F, options?: NoInfer<IdempotentOptions<InputOf<F>, Parameters<F>>>): F;

  /**
   * `@idempotent.method(options)` on a method: its calls are deduplicated as a function's
   * (the scope defaults to the method's name; the receiver is not part of the input, and
   * its `idempotencyKeyFor(input)` supplies an explicit key when no key is given).
   */
  method<I = Record<string, unknown>>(options?: IdempotentOptions<I>): MethodDecorator;

  /**
   * `@idempotent.class(options)` on a class: the options apply to every method of its
   * prototype that has no `@idempotent.method` of its own (a method's own options win
   * whole, they are not merged). Names starting with `_` and `idempotencyKeyFor` are not
   * calls; getters, setters and static methods are left alone.
   */
  class(options?: IdempotentOptions<Record<string, unknown>>): ClassDecorator;
}

function idempotentFn<F extends AsyncFunction>(fn: F, options?: NoInfer<IdempotentOptions<InputOf<F>, Parameters<F>>>): F {
  return wrap(fn, settingsOf(options), undefined);
}

function method<I>(options?: IdempotentOptions<I>): MethodDecorator {
  const settings = settingsOf(options);
  return <This, F extends AsyncFunction>(value: F, context: ClassMethodDecoratorContext<This, F>): F => {
    if ((context as { kind: string }).kind !== "method") {
      throw new InvalidArgument("@idempotent.method decorates methods", {
        detail: `It was put on a ${String((context as { kind: unknown }).kind)}.`,
      });
    }
    if (context.private) {
      throw new InvalidArgument("@idempotent.method cannot decorate a private (#) method", {
        hint: "make the method public, or wrap what it calls with idempotent()",
      });
    }
    return wrap(value, settings, String(context.name));
  };
}

function klass(options?: IdempotentOptions<Record<string, unknown>>): ClassDecorator {
  const settings = settingsOf(options);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the constraint every class type meets
  return <C extends abstract new (...args: any[]) => unknown>(value: C, context: ClassDecoratorContext<C>): C => {
    if ((context as { kind: string }).kind !== "class") {
      throw new InvalidArgument("@idempotent.class decorates classes");
    }
    const proto = (value as unknown as { prototype: object }).prototype;
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name === "constructor" || name.startsWith("_") || name === "idempotencyKeyFor") continue;
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      const member: unknown = descriptor?.value;
      if (descriptor === undefined || typeof member !== "function") continue; // a getter, a setter
      if (settingsOfFunction(member) !== undefined) continue; // its own settings win whole
      Object.defineProperty(proto, name, {
        ...descriptor,
        value: wrap(member as AsyncFunction, settings, name),
      });
    }
    return value;
  };
}

export const idempotent: Idempotent = Object.assign(idempotentFn, { method, class: klass });
