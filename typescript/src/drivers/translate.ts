/**
 * A driver's error as the package's: a server error by its SQLSTATE (with its detail and
 * hint), anything else StoreUnavailable. node-postgres and postgres.js both put the server's
 * fields on their error as `code`, `severity`, `message`, `detail` and `hint`; their own
 * errors (a lost connection, a timeout) have no `severity`.
 */

import { fromSqlstate, StoreUnavailable } from "../errors.js";
import type { IdempotencyError } from "../errors.js";

/** A server error by its SQLSTATE (with its detail and hint); anything else (a lost
 * connection, a pool that could not connect in time) is StoreUnavailable. */
export function translate(e: unknown): IdempotencyError {
  const err = (typeof e === "object" && e !== null ? e : {}) as {
    code?: unknown;
    severity?: unknown;
    message?: unknown;
    detail?: unknown;
    hint?: unknown;
  };
  if (
    typeof err.code === "string" &&
    /^[0-9A-Z]{5}$/.test(err.code) &&
    typeof err.severity === "string"
  ) {
    return fromSqlstate(
      err.code,
      typeof err.message === "string" ? err.message : String(e),
      typeof err.detail === "string" ? err.detail : undefined,
      typeof err.hint === "string" ? err.hint : undefined,
      e,
    );
  }
  const why = e instanceof Error ? e.message || e.name : String(e);
  return new StoreUnavailable(`the database could not be reached: ${why}`, {
    hint: "check that PostgreSQL is up and the pool or connection is open; the call can be retried",
    cause: e,
  });
}
