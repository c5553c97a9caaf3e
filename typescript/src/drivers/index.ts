/**
 * The connections a store runs its statements on, and which driver takes each. node-postgres
 * only for now; postgres.js is one more module and one more branch here.
 */

import { InvalidArgument } from "../errors.js";
import type { Driver } from "./driver.js";
import { isPgQueryable, PgDriver } from "./pg.js";
import type { PgQueryable, PoolOptions } from "./pg.js";

export type { Driver } from "./driver.js";
export type { PgQueryable, PgQueryConfig, PoolOptions } from "./pg.js";

/**
 * What a Store runs on: a connection string (a node-postgres Pool is opened for it), or a
 * node-postgres `Pool`, `Client` or `PoolClient`.
 */
export type StoreSource = string | PgQueryable;

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
  if (isPgQueryable(source)) return new PgDriver(source, options);
  const given: unknown = source; // a JavaScript caller's argument may be anything
  const kind =
    typeof given === "function"
      ? "function (postgres.js is not supported yet)"
      : given === null
        ? "null"
        : typeof given === "object"
          ? (given.constructor as { name?: string } | undefined)?.name || "object"
          : typeof given;
  throw new InvalidArgument(`Store cannot use a ${kind}`, {
    hint: "give a connection string, or a node-postgres (pg) Pool, Client or PoolClient",
  });
}
