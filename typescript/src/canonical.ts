/**
 * The canonical JSON of a request and its SHA-256, as the server computes them for
 * HASH_INPUT (`idem_canonical`, `idem_hash`: RFC 8785 with lossless numbers,
 * docs/canonical-json.md), so that a key built here names the call the server would name,
 * and the call a Python service names with `pg_idempotency.input_hash`.
 *
 * The value is read as the request is sent: as `JSON.stringify` reads it, except where it
 * would change a value silently. As `JSON.stringify`: `toJSON` is called (a `Date` is its
 * ISO string), boxed primitives are unboxed, a member whose value is `undefined` is left
 * out and such an array item is `null`. Unlike it:
 * - a `Set` is the array of its items (as Python's sets; `JSON.stringify` writes `{}`),
 * - `undefined` as the whole value is `null` (a call without arguments; Python's None),
 * - refused with `InvalidArgument` (`JSON.stringify` would drop them, write `null` or `{}`,
 *   or throw): a function or a symbol, NaN and ±Infinity, a `bigint`, a `Map`, a cycle,
 *   and U+0000 in a string or a member name (jsonb cannot hold it).
 * A lone UTF-16 surrogate or nesting deeper than 128 levels has no canonical form
 * (`Uncanonicalizable`, the server's IK005), as in the Python package.
 *
 * A JavaScript number is a double, and the lossless rule writes a double as ECMAScript's
 * `Number::toString` does (RFC 8785's own rule), so `String(x)` is its canonical form.
 */

import { createHash } from "node:crypto";

import { InvalidArgument, Uncanonicalizable } from "./errors.js";

/** The server's limit on nesting (IK005 beyond it). */
export const MAX_DEPTH = 128;

/** The canonical text of a JSON value: `SELECT idem_canonical($1::jsonb)` of the request
 * `value` is sent as. */
export function canonicalJson(value: unknown): string {
  return new Walk().write(value, "", 0) ?? "null";
}

/** The lowercase hex SHA-256 of the canonical text's UTF-8 bytes: the HASH_INPUT key of
 * `value`, `encode(idem_hash($1::jsonb), 'hex')`. */
export function inputHash(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}

// A lone surrogate (the u flag pairs the others into one code point) or U+0000.
const NOT_IN_JSONB = /[\0\uD800-\uDFFF]/u;

// One pass, refusing at the first fault. (Python first writes the whole value, then its
// canonical form, so a value with two faults of different kinds, a NaN and a lone
// surrogate, may be refused there for the other one; it is refused in both.)
class Walk {
  /** The containers being written, outermost first: a cycle is one met again. */
  private readonly open = new Set<object>();

  /** The canonical text of `holder[key]` (`value`), or undefined where JSON.stringify
   * leaves a member out. */
  write(value: unknown, key: string, depth: number): string | undefined {
    // A bigint's toJSON too (some programs give BigInt.prototype one), as JSON.stringify.
    if ((typeof value === "object" && value !== null) || typeof value === "bigint") {
      const toJSON: unknown = (Object(value) as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") value = (toJSON as (key: string) => unknown).call(value, key);
    }
    if (typeof value === "string") return this.string(value);
    if (typeof value === "number") return number(value);
    if (typeof value === "boolean") return value ? "true" : "false";
    if (value === undefined) return undefined;
    if (value === null) return "null";
    if (typeof value !== "object") {
      // A bigint, a function or a symbol.
      const at = key ? ` (at ${JSON.stringify(key)})` : "";
      throw refused(`a ${typeof value}${at}`, HINTS[typeof value]);
    }
    // Boxed primitives are their values, as in JSON.stringify.
    if (value instanceof Number) return number(Number(value));
    if (value instanceof String) return this.string(String(value));
    if (value instanceof Boolean) return value.valueOf() ? "true" : "false";
    if (value instanceof BigInt) throw refused("a bigint", HINTS.bigint);
    if (value instanceof Map) throw refused("a Map", "pass Object.fromEntries(map)");
    if (this.open.has(value)) {
      throw refused("a cycle: an object inside itself", "pass a tree of JSON values");
    }
    if (depth >= MAX_DEPTH) {
      throw new Uncanonicalizable("the request has no canonical form", {
        detail: `It nests arrays and objects deeper than ${MAX_DEPTH} levels.`,
        hint: "a request is an input, not a data set: flatten it",
      });
    }
    this.open.add(value);
    try {
      if (Array.isArray(value)) return this.array(value, depth);
      if (value instanceof Set) return this.array([...(value as Set<unknown>)], depth);
      return this.object(value, depth);
    } finally {
      this.open.delete(value);
    }
  }

  private array(items: readonly unknown[], depth: number): string {
    let out = "[";
    for (let i = 0; i < items.length; i++) {
      if (i > 0) out += ",";
      out += this.write(items[i], String(i), depth + 1) ?? "null";
    }
    return out + "]";
  }

  private object(value: object, depth: number): string {
    // Array.prototype.sort compares strings by their UTF-16 code units: RFC 8785's order.
    const names = Object.keys(value).sort();
    const record = value as Record<string, unknown>;
    let out = "{";
    for (const name of names) {
      const member = this.write(record[name], name, depth + 1);
      if (member === undefined) continue;
      if (out.length > 1) out += ",";
      out += this.string(name) + ":" + member;
    }
    return out + "}";
  }

  private string(s: string): string {
    if (NOT_IN_JSONB.test(s)) {
      if (s.includes("\0")) {
        throw new InvalidArgument("the value must not contain U+0000", {
          detail: "PostgreSQL's jsonb cannot hold the character U+0000.",
          hint: "remove or replace U+0000 in the value",
        });
      }
      throw new Uncanonicalizable("the request has no canonical form", {
        detail: "A string holds a lone UTF-16 surrogate, which jsonb cannot hold.",
        hint: "replace lone surrogates before passing the text: s.toWellFormed()",
      });
    }
    // JSON.stringify escapes exactly as RFC 8785 does: \" \\ \b \f \n \r \t, the other
    // characters below U+0020 as lowercase \u00xx, everything else (DEL and / too) raw.
    return JSON.stringify(s);
  }
}

const HINTS: Record<string, string> = {
  bigint: "pass it as a string, or as a number if it is exact",
  function: "pass the data, not code: JSON values only",
  symbol: "pass a string instead",
};

function number(x: number): string {
  if (!Number.isFinite(x)) {
    throw refused(`the number ${String(x)}, which JSON cannot hold`, "pass finite numbers");
  }
  // ECMAScript's Number::toString is RFC 8785's number form (-0 is "0").
  return String(x);
}

function refused(what: string, hint: string | undefined): InvalidArgument {
  return new InvalidArgument("the value cannot be stored as JSON", {
    detail: `It holds ${what}.`,
    hint,
  });
}
