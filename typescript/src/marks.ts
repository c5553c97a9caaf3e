/**
 * The responses recorded in place of a result that cannot or must not be kept, so that
 * every retry is told what happened instead of running the call again. The same objects as
 * the Rust client's and the Python package's (docs/client.md, "After the tool ran"):
 * records are shared across languages.
 */

export const MARK = "pg_idempotency";

export type MarkKind = "unrecorded" | "outcome_unknown";

export function unrecorded(why: string): { [MARK]: { unrecorded: string } } {
  return { [MARK]: { unrecorded: why } };
}

export function outcomeUnknown(why: string): { [MARK]: { outcome_unknown: string } } {
  return { [MARK]: { outcome_unknown: why } };
}

/** [kind, why] when the response is a mark, else undefined. */
export function markOf(response: unknown): [MarkKind, string] | undefined {
  if (typeof response !== "object" || response === null || Array.isArray(response)) {
    return undefined;
  }
  const members = Object.keys(response);
  if (members.length !== 1 || members[0] !== MARK) return undefined;
  const inner = (response as Record<string, unknown>)[MARK];
  if (typeof inner !== "object" || inner === null) return undefined;
  for (const kind of ["unrecorded", "outcome_unknown"] as const) {
    const why = (inner as Record<string, unknown>)[kind];
    if (typeof why === "string") return [kind, why];
  }
  return undefined;
}
