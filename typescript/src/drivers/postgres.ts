/**
 * postgres.js (`postgres`): its root `sql` (each call on a pool connection of its own,
 * committed by itself), the `sql` a `sql.begin(async (tx) => ...)` or a `tx.savepoint`
 * hands out (a call inside it stays in that transaction), or a reserved connection
 * (`await sql.reserve()`). The statements are sent with `sql.unsafe(text, params)`: its
 * placeholders are $1..$n too, and the instance's `prepare: false` (behind PgBouncer in
 * transaction mode) wins over ours.
 */

import { InvalidArgument } from "../errors.js";
import type { Statement } from "../sql.js";
import type { Driver } from "./driver.js";
import { translate } from "./translate.js";

/**
 * What the driver calls on a postgres.js `Sql`, `TransactionSql` or `ReservedSql`: typed
 * loosely so that the package's types do not need postgres.js's. A TransactionSql has
 * `savepoint`; the root `sql` has `begin`.
 */
export interface PostgresSql {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- postgres.js's own parameter type, any of its instances' types
  unsafe(query: string, parameters?: any[], options?: { prepare?: boolean }): { values(): PromiseLike<unknown> };
}

interface PostgresTransactionSql extends PostgresSql {
  savepoint<T>(block: (sql: PostgresSql) => T | Promise<T>): Promise<T>;
}

/** A postgres.js instance is a function (the tagged template) with `unsafe`. */
export function isPostgresSql(source: unknown): source is PostgresSql {
  return typeof source === "function" && typeof (source as { unsafe?: unknown }).unsafe === "function";
}

const isTransaction = (sql: PostgresSql): sql is PostgresTransactionSql =>
  typeof (sql as { savepoint?: unknown }).savepoint === "function";

/** What the statements' arrays hold (sql.ts). */
type Item = string | number | boolean | null | undefined;

/**
 * A one-dimensional array as PostgreSQL's array literal: postgres.js serializes an array
 * parameter by the array types it fetched at connect, and an instance made with
 * `fetch_types: false` (common behind poolers) has none; text it sends as it is.
 */
function arrayLiteral(items: readonly Item[]): string {
  const parts = items.map((x) => {
    if (x === null || x === undefined) return "NULL";
    const text = typeof x === "boolean" ? (x ? "t" : "f") : String(x);
    return `"${text.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
  });
  return `{${parts.join(",")}}`;
}

export class PostgresDriver implements Driver {
  readonly identity: object;

  constructor(
    private readonly sql: PostgresSql,
    private readonly prepare: boolean,
  ) {
    this.identity = sql;
  }

  async query(statement: Statement, params: readonly unknown[]): Promise<unknown[][]> {
    const values = params.map((p) => (Array.isArray(p) ? arrayLiteral(p as Item[]) : p));
    try {
      return (await this.sql.unsafe(statement.text, values, { prepare: this.prepare }).values()) as unknown[][];
    } catch (e) {
      throw translate(e);
    }
  }

  async transaction<T>(block: (inside: Driver) => Promise<T>): Promise<T> {
    const sql = this.sql;
    if (!isTransaction(sql)) {
      throw new InvalidArgument("a transaction needs the sql of sql.begin, not the root sql", {
        detail: "The root sql runs each statement on a pool connection of its own, and a reserved one is not in postgres.js's transaction.",
        hint: "call it inside sql.begin(async (tx) => ...) and give it tx",
      });
    }
    // Inside the caller's transaction: postgres.js's own savepoint, so that a failed
    // statement of ours fails this savepoint only (postgres.js fails a whole transaction
    // or savepoint in which any of its statements failed, caught or not).
    let thrown: { error: unknown } | undefined;
    try {
      return await sql.savepoint(async (inner) => {
        try {
          return await block(new PostgresDriver(inner, this.prepare));
        } catch (e) {
          thrown = { error: e };
          throw e;
        }
      });
    } catch (e) {
      if (thrown !== undefined && thrown.error === e) throw e;
      throw translate(e); // postgres.js's own: its SAVEPOINT, RELEASE, or a lost connection
    }
  }

  close(): Promise<void> {
    // The instance is the caller's (sql.end() is theirs to call).
    return Promise.resolve();
  }
}
