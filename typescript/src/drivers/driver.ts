/**
 * What the store needs of a database library: run one statement, answer its rows. Each
 * library has a module here (pg.ts: node-postgres, postgres.ts: postgres.js); store.ts knows
 * only this interface.
 */

import type { Statement } from "../sql.js";

export interface Driver {
  /**
   * What names "the same process" for a held call (live.ts): the pool or connection the
   * statements run on, so that two stores over one pool share their holders.
   */
  readonly identity: object;

  /**
   * Run `statement` with `params` (text, numbers, booleans, arrays of them, null) and give
   * back its rows as arrays of columns. A server error is thrown as the package's error of
   * its SQLSTATE (errors.fromSqlstate), with its detail and hint; a lost or unusable
   * connection as StoreUnavailable. The driver's own error is the `cause`.
   */
  query(statement: Statement, params: readonly unknown[]): Promise<unknown[][]>;

  /**
   * Run `block` in a transaction on the one connection this driver has, with the driver its
   * statements go through: BEGIN ... COMMIT on an idle connection, a savepoint inside the
   * caller's transaction (so that undoing the block leaves the caller's transaction usable).
   * Undone when `block` throws, whose error is then thrown as it is. A pool or a connection
   * string is refused with InvalidArgument: a transaction needs one connection.
   */
  transaction<T>(block: (inside: Driver) => Promise<T>): Promise<T>;

  /** Close what the driver opened itself (a pool for a connection string); nothing else. */
  close(): Promise<void>;
}
