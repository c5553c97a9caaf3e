/**
 * What the store needs of a database library: run one statement, answer its rows. Each
 * library has a module here (pg.ts: node-postgres); store.ts knows only this interface, so
 * that another library is one more module and one more branch in index.ts.
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

  /** Close what the driver opened itself (a pool for a connection string); nothing else. */
  close(): Promise<void>;
}
