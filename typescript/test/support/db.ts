/**
 * The tests run against a real PostgreSQL with the SQL API installed (the extension or the
 * portable variant): PGIDEM_DSN names the database (scripts/test-typescript.sh makes a fresh
 * one per version and backend), PGIDEM_BACKEND says which backend it holds. Without
 * PGIDEM_DSN every test that needs the database is skipped, with that reason.
 */

import { randomBytes } from "node:crypto";
import { after, test } from "node:test";
import type { TestContext } from "node:test";

import pg from "pg";

import { Store } from "../../src/index.js";
import type { StoreOptions } from "../../src/index.js";

export const DSN = process.env["PGIDEM_DSN"] ?? "";
export const BACKEND = process.env["PGIDEM_BACKEND"] ?? "extension";

const SKIP = DSN ? false : "PGIDEM_DSN is not set: no database to test against (scripts/test-typescript.sh sets it)";

/** A test that needs the database: skipped, saying why, without PGIDEM_DSN. */
export function dbTest(name: string, fn: (t: TestContext) => Promise<void>): void {
  void test(name, { skip: SKIP }, fn);
}

/** The test file's store, closed after its tests. Without PGIDEM_DSN it connects nowhere:
 * a connection string's pool is opened at the first call, which no skipped test makes. */
export function fileStore(options?: StoreOptions): Store {
  const store = new Store(DSN || "postgresql://nobody@127.0.0.1:1/none", options);
  after(() => store.close());
  return store;
}

/** A scope no other test (or earlier run) uses. */
export function scopeFor(name: string): string {
  return `ts-${name.replace(/\W+/g, "-").slice(0, 60)}-${randomBytes(4).toString("hex")}`;
}

/** The DSN with one more query parameter (application_name=...). */
export function dsnWith(param: string, value: string): string {
  const url = new URL(DSN);
  url.searchParams.set(param, value);
  return url.toString();
}

/** An autocommit pool to look at the records with plain SQL, closed after the file. */
let inspector: pg.Pool | undefined;

export function sql(): pg.Pool {
  if (inspector === undefined) {
    inspector = new pg.Pool({ connectionString: DSN, max: 4 });
    inspector.on("error", () => undefined);
  }
  return inspector;
}

after(async () => {
  await inspector?.end();
});

export async function one<T = Record<string, unknown>>(text: string, values: unknown[] = []): Promise<T | undefined> {
  const result = await sql().query(text, values);
  return result.rows[0] as T | undefined;
}

export interface RawRecord {
  state: string;
  fence: string;
  attempt: number;
  upstream_key: string;
  response: unknown;
  lease_until: Date | null;
  expires_at: Date;
}

export async function recordOf(scope: string, key: string): Promise<RawRecord | undefined> {
  return one<RawRecord>(
    "SELECT state, fence, attempt, upstream_key::text, response, lease_until, expires_at FROM idem_lookup($1, $2)",
    [scope, key],
  );
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => {
    setTimeout(resolve, ms);
  });

/** Wait until the server's clock is past `at` (a lease's or a ttl's end): the order comes
 * from the server's own time, the one that decides. */
export async function untilServerPasses(at: Date, what: string, limitMs = 30_000): Promise<void> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const row = await one<{ past: boolean }>("SELECT clock_timestamp() > $1::timestamptz AS past", [at]);
    if (row?.past === true) return;
    if (Date.now() > deadline) throw new Error(`the server's clock did not pass ${what} (${at.toISOString()}) in ${limitMs} ms`);
    await sleep(20);
  }
}

/** Wait until `condition()` holds (polled every 20 ms), or fail after `limitMs`. */
export async function until(condition: () => boolean | Promise<boolean>, what: string, limitMs = 30_000): Promise<void> {
  const deadline = Date.now() + limitMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${limitMs} ms`);
    await sleep(20);
  }
}

/** The side effect under test: every run of a function appends here. */
export class Effects {
  readonly runs: unknown[] = [];

  add(what: unknown): number {
    this.runs.push(what);
    return this.runs.length;
  }

  get count(): number {
    return this.runs.length;
  }
}

/** A promise and its resolver: one side of a test waits for the other. */
export class Gate {
  readonly promise: Promise<void>;
  private resolver: () => void = () => undefined;
  opened = false;

  constructor() {
    this.promise = new Promise((resolve) => {
      this.resolver = resolve;
    });
  }

  open(): void {
    this.opened = true;
    this.resolver();
  }
}

/** The key hashInput derives from `input`, as the server computes it. */
export async function serverKey(input: unknown): Promise<string> {
  const row = await one<{ key: string }>("SELECT encode(idem_hash($1::jsonb), 'hex') AS key", [JSON.stringify(input)]);
  return row?.key ?? "";
}
