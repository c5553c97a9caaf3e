/**
 * The connections a store runs its statements on, and which driver takes each:
 * node-postgres (pg.ts) and postgres.js (postgres.ts).
 */

import { InvalidArgument } from "../errors.js";
import type { Driver } from "./driver.js";
import { isPgQueryable, PgDriver } from "./pg.js";
import type { PgQueryable, PoolOptions } from "./pg.js";
import { isPostgresSql, PostgresDriver } from "./postgres.js";
import type { PostgresSql } from "./postgres.js";

export type { Driver } from "./driver.js";
export type { PgQueryable, PgQueryConfig, PoolOptions } from "./pg.js";
export type { PostgresSql } from "./postgres.js";

/**
 * What a Store runs on: a connection string (a node-postgres Pool is opened for it), a
 * node-postgres `Pool`, `Client` or `PoolClient`, or a postgres.js `sql` (the root one, a
 * transaction's, or a reserved connection).
 */
export type StoreSource = string | PgQueryable | PostgresSql;

export interface DriverOptions {
  prepare: boolean;
  poolOptions?: PoolOptions | undefined;
}

export function driverFor(source: StoreSource, options: DriverOptions): Driver {
  if (typeof source === "string") {
    if (source.trim() === "") {
      throw new InvalidArgument("the connection string is empty", {
        hint: 'give a libpq URL ("postgresql://app@localhost/app") or a pg Pool or Client',
      });
    }
    return new PgDriver(source, options);
  }
  // postgres.js first: its sql is a function, which isPgQueryable does not take anyway.
  if (isPostgresSql(source)) return new PostgresDriver(source, options.prepare);
  if (isPgQueryable(source)) return new PgDriver(source, options);
  const given: unknown = source; // a JavaScript caller's argument may be anything
  const kind =
    typeof given === "function"
      ? "function that is not a postgres.js sql"
      : given === null
        ? "null"
        : typeof given === "object"
          ? (given.constructor as { name?: string } | undefined)?.name || "object"
          : typeof given;
  throw new InvalidArgument(`Store cannot use a ${kind}`, {
    hint: "give a connection string, a node-postgres (pg) Pool, Client or PoolClient, or a postgres.js sql",
  });
}
