/**
 * The store: the SQL API's calls over any supported connection (drivers/), one statement
 * each. The same methods as the Python package's Store, awaited.
 */

import {
  beginOf,
  boolOf,
  int,
  recordOf,
  stateOf,
  timeOf,
} from "./answers.js";
import type {
  BatchBegin,
  BatchCompletion,
  BatchItem,
  Begin,
  CallRecord,
  CompleteState,
  Row,
} from "./answers.js";
import { driverFor } from "./drivers/index.js";
import type { Driver, PoolOptions, StoreSource } from "./drivers/index.js";
import { InvalidArgument, LeaseLost, Mismatch, NotInstalled, RepeatRefused } from "./errors.js";
import type { IdempotencyError } from "./errors.js";
import type { OnCacheHit, OnMismatch } from "./options.js";
import { seconds, serverWord } from "./options.js";
import { beginSignature, checkText, dumps, statementsIn } from "./sql.js";
import type { Statement, Statements } from "./sql.js";

export interface StoreOptions {
  /** Where the API's functions are (`public` after CREATE EXTENSION). */
  schema?: string;
  /** Prepare the statements (default true); false behind a pooler in transaction mode
   * (PgBouncer), whose next server connection does not have them. With postgres.js, the
   * instance's own `prepare: false` turns them off too. */
  prepare?: boolean;
  /** For a connection string: the node-postgres Pool's options (`max` 20 and
   * `connectionTimeoutMillis` 30 000 unless given). */
  poolOptions?: PoolOptions;
}

/** idem_begin's settings; durations in milliseconds. Unset: the scope's policy governs. */
export interface BeginOptions {
  ttl?: number | null;
  lease?: number | null;
  onCacheHit?: OnCacheHit | null;
  onMismatch?: OnMismatch | null;
  wait?: number | null;
  /** Repeat a begin whose answer was lost: the same token gets the same claim back. */
  claimToken?: string | null;
  unresolvedTtl?: number | null;
}

export interface BatchOptions {
  ttl?: number | null;
  lease?: number | null;
  onCacheHit?: OnCacheHit | null;
  onMismatch?: OnMismatch | null;
}

export interface CompleteOptions {
  /** Whether the call succeeded (default true). */
  succeeded?: boolean;
  /** Keep a failure for replay (unset: the scope's policy). */
  cacheFailure?: boolean | null;
}

/** The settings' part of idem_begin's parameters (ttl, lease, on_cache_hit, on_mismatch,
 * wait, unresolved_ttl), made once per wrapped function. */
export type Sent = readonly [
  number | null,
  number | null,
  string | null,
  string | null,
  number | null,
  number | null,
];

export const MAX_BATCH_ITEMS = 1000;

// A batch answers these refusals as items' outcomes (docs/errors.md).
const ITEM_REFUSALS: Readonly<Record<string, [new (m: string, o: { detail: string }) => IdempotencyError, string]>> = {
  mismatch: [Mismatch, "idempotency key reused with a different request"],
  refused: [RepeatRefused, "the call was already made and on_cache_hit is fail_fast"],
  lease_lost: [LeaseLost, "the fence no longer holds the record"],
};

function checkBatch(items: readonly unknown[]): void {
  if (!Array.isArray(items)) {
    throw new InvalidArgument("a batch is an array of items", { hint: 'store.beginBatch(scope, ["a", { key: "b", request }])' });
  }
  if (items.length > MAX_BATCH_ITEMS) {
    throw new InvalidArgument(`a batch holds at most ${MAX_BATCH_ITEMS} items`, {
      detail: `The batch has ${items.length} items.`,
      hint: "split it into batches of 1000 or fewer",
    });
  }
}

const optionalJson = (value: unknown): string | null =>
  value === null || value === undefined ? null : dumps(value);

/**
 * The SQL API over a node-postgres `Pool` or a postgres.js root `sql` (each call on a pool
 * connection, committed by itself), a node-postgres `Client` or `PoolClient` or the `sql` of
 * a postgres.js transaction (a call inside the caller's open transaction stays in it), or a
 * connection string (a node-postgres Pool is opened, and closed by `close()`).
 */
export class Store {
  readonly schema: string;
  /** @internal Whether statements are prepared (an exactly-once call's store takes it). */
  readonly prepare: boolean;
  private readonly driver: Driver;
  private readonly sql: Statements;

  constructor(source: StoreSource, options: StoreOptions = {}) {
    this.schema = options.schema ?? "public";
    this.sql = statementsIn(this.schema);
    this.prepare = options.prepare ?? true;
    this.driver = driverFor(source, {
      prepare: this.prepare,
      poolOptions: options.poolOptions,
    });
  }

  /** @internal What names "the same process" for a held call (live.ts). */
  get identity(): object {
    return this.driver.identity;
  }

  /**
   * @internal Run `block` in one transaction on this store's connection (a savepoint inside
   * the caller's), with a store whose statements go through it: the exactly-once block. The
   * store given to `block` is this one over the transaction's driver (postgres.js hands a
   * savepoint its own sql; node-postgres runs it on the same client).
   */
  async transaction<T>(block: (inside: Store) => Promise<T>): Promise<T> {
    return this.driver.transaction((driver) =>
      block(driver === this.driver ? this : (Object.create(this, { driver: { value: driver } }) as Store)),
    );
  }

  private async one(statement: Statement, params: readonly unknown[]): Promise<Row | undefined> {
    const rows = await this.driver.query(statement, params);
    return rows[0];
  }

  private async only(statement: Statement, params: readonly unknown[]): Promise<Row> {
    const row = await this.one(statement, params);
    // The API's functions answer one row or raise.
    if (row === undefined) throw new TypeError(`${statement.name} answered no row`);
    return row;
  }

  /** Claim the call, or learn its result (replay) or that it runs (inProgress). `key` null:
   * derived by the server from `request` (hashInput). */
  async begin(scope: string, key: string | null, request?: unknown, options: BeginOptions = {}): Promise<Begin> {
    checkText(scope, "scope");
    checkText(key, "key");
    const row = await this.only(this.sql.begin, [
      scope,
      key,
      optionalJson(request),
      seconds(options.ttl, "ttl"),
      seconds(options.lease, "lease"),
      serverWord(options.onCacheHit),
      serverWord(options.onMismatch),
      seconds(options.wait, "wait"),
      options.claimToken ?? null,
      seconds(options.unresolvedTtl, "unresolvedTtl"),
    ]);
    return beginOf(row);
  }

  /** @internal The wrapper's begin: its settings' parameters made once (`sent`); the
   * answer's leaseUntil and expiresAt are null. */
  async claim(scope: string, key: string | null, requestJson: string | null, sent: Sent): Promise<Begin> {
    checkText(scope, "scope");
    checkText(key, "key");
    const [ttl, lease, onCacheHit, onMismatch, wait, unresolvedTtl] = sent;
    const row = await this.only(this.sql.beginCall, [
      scope,
      key,
      requestJson,
      ttl,
      lease,
      onCacheHit,
      onMismatch,
      wait,
      null,
      unresolvedTtl,
    ]);
    return beginOf(row);
  }

  /** Record the result under the claim's fence; the record's state is answered. */
  async complete(
    scope: string,
    key: string,
    fence: number,
    response: unknown,
    options: CompleteOptions = {},
  ): Promise<CompleteState> {
    checkText(scope, "scope");
    checkText(key, "key");
    const row = await this.only(this.sql.complete, [
      scope,
      key,
      fence,
      dumps(response),
      options.succeeded ?? true,
      options.cacheFailure ?? null,
    ]);
    return stateOf(row[0]);
  }

  /** @internal The wrapper's complete: the response already JSON text. */
  async completeJson(
    scope: string,
    key: string,
    fence: number,
    responseJson: string,
  ): Promise<CompleteState> {
    const row = await this.only(this.sql.completeCall, [scope, key, fence, responseJson, true, null]);
    return stateOf(row[0]);
  }

  /** Give the claim up: the next call runs afresh. */
  async release(scope: string, key: string, fence: number): Promise<void> {
    await this.driver.query(this.sql.release, [scope, key, fence]);
  }

  /** Renew the lease (a heartbeat), by `lease` ms (unset: the policy's); answers the new
   * lease_until. */
  async extend(scope: string, key: string, fence: number, lease?: number | null): Promise<Date | null> {
    const row = await this.one(this.sql.extend, [scope, key, fence, seconds(lease, "lease")]);
    return row === undefined ? null : timeOf(row[0]);
  }

  /** The record of a call until it expires (null: absent or expired). */
  async lookup(scope: string, key: string): Promise<CallRecord | null> {
    checkText(scope, "scope");
    checkText(key, "key");
    const row = await this.one(this.sql.lookup, [scope, key]);
    return row === undefined ? null : recordOf(row);
  }

  /** Remove a record (an operator's fix of a bad cached entry); true when there was one. */
  async forget(scope: string, key: string): Promise<boolean> {
    checkText(scope, "scope");
    checkText(key, "key");
    const row = await this.one(this.sql.forget, [scope, key]);
    return row !== undefined && boolOf(row[0]);
  }

  /** Delete the expired records; answers how many. */
  async purgeExpired(): Promise<number> {
    const row = await this.one(this.sql.purge, []);
    return row === undefined ? 0 : int(row[0]);
  }

  /**
   * Claim many calls of one scope in one statement (at most 1000): per item, in the order
   * given, its Begin or its refusal (Mismatch, RepeatRefused) as a value. An item no store
   * can take fails the whole batch before anything is claimed.
   */
  async beginBatch(
    scope: string,
    items: readonly (BatchItem | string)[],
    options: BatchOptions = {},
  ): Promise<BatchBegin[]> {
    checkBatch(items);
    checkText(scope, "scope");
    const norm: BatchItem[] = items.map((i) => (typeof i === "string" ? { key: i } : i));
    for (const i of norm) checkText(i.key, "key");
    const keys = norm.map((i) => i.key ?? null);
    const requests = norm.map((i) => optionalJson(i.request));
    const tokens = norm.map((i) => i.claimToken ?? null);
    const rows = await this.driver.query(this.sql.beginBatch, [
      scope,
      keys,
      requests.some((r) => r !== null) ? requests : null,
      seconds(options.ttl, "ttl"),
      seconds(options.lease, "lease"),
      serverWord(options.onCacheHit),
      serverWord(options.onMismatch),
      tokens.some((t) => t !== null) ? tokens : null,
    ]);
    return rows.map((row) => {
      const refusal = ITEM_REFUSALS[String(row[1])];
      if (refusal !== undefined) {
        const [cls, message] = refusal;
        return new cls(message, {
          detail: `Item ${String(row[0])} of the batch of scope ${JSON.stringify(scope)}, key ${JSON.stringify(row[11])}.`,
        });
      }
      return beginOf(row.slice(1));
    });
  }

  /** Complete many claims in one statement (at most 1000); per item its state, or
   * LeaseLost as a value. */
  async completeBatch(scope: string, items: readonly BatchCompletion[]): Promise<(CompleteState | LeaseLost)[]> {
    checkBatch(items);
    checkText(scope, "scope");
    for (const i of items) checkText(i.key, "key");
    const rows = await this.driver.query(this.sql.completeBatch, [
      scope,
      items.map((i) => i.key),
      items.map((i) => i.fence),
      items.map((i) => dumps(i.response)),
      items.map((i) => i.succeeded ?? true),
      items.map((i) => i.cacheFailure ?? null),
    ]);
    return rows.map((row) => {
      const item = int(row[0]);
      if (row[1] === "lease_lost") {
        return new LeaseLost("the fence no longer holds the record", {
          detail: `Item ${item} of the batch, key ${JSON.stringify(items[item - 1]?.key)}.`,
        });
      }
      return stateOf(row[2]);
    });
  }

  /** Throw NotInstalled unless the API is installed in `schema` here. */
  async checkInstalled(): Promise<void> {
    const row = await this.one(this.sql.installed, [beginSignature(this.schema)]);
    if (row === undefined || !boolOf(row[0])) {
      throw new NotInstalled(
        `pg_idempotency's SQL API is not installed in schema ${JSON.stringify(this.schema)} of this database`,
        {
          hint:
            "CREATE EXTENSION pg_idempotency (or install the portable SQL: docs/installation.md), " +
            "or name the schema the API is in: new Store(source, { schema })",
        },
      );
    }
  }

  /** Close the pool this store opened (a connection string given); a pool or client given
   * is the caller's. */
  async close(): Promise<void> {
    await this.driver.close();
  }
}
