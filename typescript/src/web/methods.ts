/**
 * Which methods change something upstream (and so carry Idempotency-Key and are
 * deduplicated without settings of their own), as the Rust client's web executor says.
 */

import { InvalidArgument } from "../errors.js";

const READS = new Set(["GET", "HEAD", "OPTIONS", "TRACE"]);
const WRITES = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** The call's own word (`sideEffect`), else its method's. Any other method is refused:
 * guessing either way is wrong for some provider. */
export function changesSomething(method: string, sideEffect: boolean | undefined): boolean {
  if (sideEffect !== undefined) return sideEffect;
  if (READS.has(method)) return false;
  if (WRITES.has(method)) return true;
  throw new InvalidArgument(`the method ${method} is neither a read nor a write pg-idempotency knows`, {
    detail:
      "GET, HEAD, OPTIONS and TRACE are reads (no Idempotency-Key, deduplicated only by " +
      "settings of their own); POST, PUT, PATCH and DELETE change something " +
      "(Idempotency-Key, deduplicated). Any other method is not guessed.",
    hint: "say how to treat it: sideEffect: true to treat it as POST, sideEffect: false to treat it as GET",
  });
}
