/**
 * node-postgres (`pg`): a Pool (each call on a pool connection of its own, committed by
 * itself), a Client or a PoolClient (a call inside the caller's open transaction stays in
 * it; on an idle one, PostgreSQL commits each statement by itself), or a connection string
 * (a Pool is opened at the first call, and closed by close()). The statements are sent as
 * written: node-postgres's placeholders are $1..$n too.
 */

import { InvalidArgument, StoreUnavailable } from "../errors.js";
import type { Statement } from "../sql.js";
import type { Driver } from "./driver.js";
import { translate } from "./translate.js";

/** What the driver calls on a node-postgres Pool, Client or PoolClient. */
export interface PgQueryable {
  query(config: PgQueryConfig): Promise<{ rows: unknown[] }>;
}

/** A Client or PoolClient (node-postgres 8.23 tells its transaction status); a Pool has no
 * such method. */
interface PgConnection extends PgQueryable {
  getTransactionStatus(): string | null;
}

const isConnection = (source: PgQueryable | undefined): source is PgConnection =>
  typeof (source as Partial<PgConnection> | undefined)?.getTransactionStatus === "function";

/** Savepoint names, unique in the process: a block nested in another gets its own. */
let savepoints = 0;

export interface PgQueryConfig {
  text: string;
  values: unknown[];
  rowMode: "array";
  name?: string;
}

interface PgPool extends PgQueryable {
  on(event: "error", listener: (err: Error) => void): unknown;
  end(): Promise<void>;
}

/** A pool opened for a connection string: one connection at first, more on demand (a
 * heartbeat, a duplicate that waits inside idem_begin and concurrent calls each hold one).
 * Its idle connections do not keep the process alive: a script ends when its work does,
 * without closing the store. */
export const POOL_DEFAULTS: PoolOptions = { max: 20, connectionTimeoutMillis: 30_000, allowExitOnIdle: true };

/** Options of the node-postgres Pool opened for a connection string (its PoolConfig:
 * `max`, `connectionTimeoutMillis`, `ssl`, ...). Typed loosely so that the package's types
 * do not need @types/pg. */
export type PoolOptions = Readonly<Record<string, unknown>>;

export function isPgQueryable(source: unknown): source is PgQueryable {
  return (
    typeof source === "object" &&
    source !== null &&
    typeof (source as { query?: unknown }).query === "function"
  );
}

/** A short, stable digest of a statement's text: its prepared statement's name, so that two
 * schemas' texts never share one name on a connection. */
function digest(text: string): string {
  let h = 0x811c9dc5; // FNV-1a, 32 bits
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, "0");
}

export interface PgDriverOptions {
  /** Prepare the statements (named, once per connection); false behind a pooler in
   * transaction mode (PgBouncer), whose next server connection does not have them. */
  prepare: boolean;
  /** Given to the Pool opened for a connection string (over POOL_DEFAULTS). */
  poolOptions?: PoolOptions | undefined;
}

export class PgDriver implements Driver {
  readonly identity: object;
  /** The pool or client given (the caller's). */
  private readonly given: PgQueryable | undefined;
  /** For a connection string: the pool, once open, and its opening. */
  private readonly connectionString: string | undefined;
  private pool: PgPool | undefined;
  private opening: Promise<PgPool> | undefined;
  private closed = false;
  private readonly prepare: boolean;
  private readonly poolOptions: PoolOptions | undefined;
  private readonly names = new Map<string, string>();

  constructor(source: string | PgQueryable, options: PgDriverOptions) {
    this.prepare = options.prepare;
    this.poolOptions = options.poolOptions;
    if (typeof source === "string") {
      this.connectionString = source;
      this.identity = this;
    } else {
      this.given = source;
      this.identity = source;
    }
  }

  private name(statement: Statement): string {
    let name = this.names.get(statement.text);
    if (name === undefined) {
      name = `pg_idempotency_${statement.name}_${digest(statement.text)}`;
      this.names.set(statement.text, name);
    }
    return name;
  }

  /** The pool for the connection string, opened at the first call. */
  private open(): Promise<PgPool> {
    if (this.closed) {
      return Promise.reject(new StoreUnavailable("the store is closed", { hint: "make a new Store" }));
    }
    this.opening ??= openPool(this.connectionString ?? "", this.poolOptions).then((pool) => {
      this.pool = pool;
      return pool;
    });
    return this.opening;
  }

  async query(statement: Statement, params: readonly unknown[]): Promise<unknown[][]> {
    const source = this.given ?? this.pool ?? (await this.open());
    const config: PgQueryConfig = { text: statement.text, values: [...params], rowMode: "array" };
    if (this.prepare) config.name = this.name(statement);
    try {
      const result = await source.query(config);
      return result.rows as unknown[][];
    } catch (e) {
      throw translate(e);
    }
  }

  async transaction<T>(block: (inside: Driver) => Promise<T>): Promise<T> {
    const conn = this.given;
    if (!isConnection(conn)) {
      throw new InvalidArgument("a transaction needs one connection, not a pool", {
        hint: "give the Client or PoolClient your writes use (const client = await pool.connect())",
      });
    }
    const run = async (text: string): Promise<void> => {
      try {
        await conn.query({ text, values: [], rowMode: "array" });
      } catch (e) {
        throw translate(e);
      }
    };
    // 'I': idle (our own transaction); 'T': inside the caller's (a savepoint of ours); 'E':
    // the caller's transaction failed: the SAVEPOINT is refused (25P02), as any statement.
    const savepoint = conn.getTransactionStatus() === "I" ? null : `pg_idempotency_${++savepoints}`;
    await run(savepoint === null ? "BEGIN" : `SAVEPOINT ${savepoint}`);
    let result: T;
    try {
      result = await block(this);
    } catch (e) {
      // Undo the block. A connection lost meanwhile has nothing to roll back (the server
      // ended the transaction); the block's own error is the one to see.
      await run(savepoint === null ? "ROLLBACK" : `ROLLBACK TO SAVEPOINT ${savepoint}; RELEASE SAVEPOINT ${savepoint}`).catch(
        () => undefined,
      );
      throw e;
    }
    await run(savepoint === null ? "COMMIT" : `RELEASE SAVEPOINT ${savepoint}`);
    return result;
  }

  async close(): Promise<void> {
    this.closed = true;
    const opening = this.opening;
    this.opening = undefined;
    this.pool = undefined;
    if (opening === undefined) return; // nothing opened here (or the pool is the caller's)
    let pool: PgPool;
    try {
      pool = await opening;
    } catch {
      return; // never opened (node-postgres missing): nothing to close
    }
    await pool.end();
  }
}

async function openPool(connectionString: string, options: PoolOptions | undefined): Promise<PgPool> {
  let Pool: typeof import("pg").Pool;
  try {
    Pool = (await import("pg")).default.Pool;
  } catch (e) {
    throw new InvalidArgument("a connection string needs node-postgres, which is not installed", {
      hint: "npm install pg (or give the Store a pool or client of your own)",
      cause: e,
    });
  }
  const pool = new Pool({ ...POOL_DEFAULTS, ...options, connectionString });
  // A pooled connection that breaks while idle is reported on the pool; unheard, the event
  // would end the process. The pool drops that connection, and the next call opens another.
  pool.on("error", () => undefined);
  return pool;
}
