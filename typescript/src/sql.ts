/**
 * The SQL API's statements, their parameters and their answers, one place for every driver.
 * Statements are written with $1..$n (each used once, in order). Parameters cross as text,
 * numbers and booleans only, so that every driver sends them alike: JSON as text cast to
 * jsonb, durations as seconds cast to interval, uuids as text; answers come back as text
 * too (JSON parsed here). The texts are the Python package's (_sql.py), word for word.
 */

import { InvalidArgument } from "./errors.js";

/** One statement with $n placeholders; `name` tells a driver which one it is. */
export interface Statement {
  readonly name: string;
  readonly text: string;
}

export interface Statements {
  readonly begin: Statement;
  /** The decorator's begin: begin's columns, the two timestamps it never reads NULL. */
  readonly beginCall: Statement;
  readonly beginBatch: Statement;
  readonly complete: Statement;
  /** The decorator's complete: the state only. */
  readonly completeCall: Statement;
  readonly completeBatch: Statement;
  readonly release: Statement;
  readonly extend: Statement;
  readonly lookup: Statement;
  readonly forget: Statement;
  readonly purge: Statement;
  readonly installed: Statement;
}

const NO_TIMES = "NULL::pg_catalog.timestamptz, NULL::pg_catalog.timestamptz,";

export function quotedSchema(schema: string): string {
  if (typeof schema !== "string" || schema === "" || schema.includes("\0")) {
    throw new InvalidArgument("schema must be a non-empty name", {
      detail: `schema is ${JSON.stringify(schema)}.`,
    });
  }
  return `"${schema.replaceAll('"', '""')}"`;
}

const t = (n: number): string => `$${n}::pg_catalog.text`;
const j = (n: number): string => `$${n}::pg_catalog.text::pg_catalog.jsonb`;
const secs = (n: number): string => `pg_catalog.make_interval(secs => $${n}::pg_catalog.float8)`;

const BEGIN_COLS =
  "outcome, fence, attempt, recovered, upstream_key::pg_catalog.text, succeeded, " +
  "response::pg_catalog.text, lease_until, expires_at, " +
  "extract(epoch FROM retry_after)::pg_catalog.float8, key, " +
  // The lease left by the server's clock: the heartbeat's pace, whatever the skew.
  "extract(epoch FROM lease_until - pg_catalog.clock_timestamp())::pg_catalog.float8";

const cache = new Map<string, Statements>();

/**
 * The statements for the API in `schema`. Every function is named with its schema: an
 * unqualified call would run whatever idem_begin a schema earlier on the search_path holds
 * (docs/security.md).
 */
export function statementsIn(schema = "public"): Statements {
  const known = cache.get(schema);
  if (known !== undefined) return known;
  const s = quotedSchema(schema);
  const beginArgs =
    `${t(1)}, ${t(2)}, ${j(3)}, ${secs(4)}, ${secs(5)}, ${t(6)}, ${t(7)}, ${secs(8)}, ` +
    `$9::pg_catalog.text::pg_catalog.uuid, ${secs(10)}`;
  const statements: Statements = {
    begin: {
      name: "begin",
      text: `SELECT ${BEGIN_COLS} FROM ${s}.idem_begin(${beginArgs})`,
    },
    beginCall: {
      name: "begin_call",
      text:
        `SELECT ${BEGIN_COLS.replace("lease_until, expires_at,", NO_TIMES)} FROM ` +
        `${s}.idem_begin(${beginArgs})`,
    },
    completeCall: {
      name: "complete_call",
      text:
        `SELECT state FROM ${s}.idem_complete(${t(1)}, ${t(2)}, $3::pg_catalog.int8, ` +
        `${j(4)}, $5::pg_catalog.bool, $6::pg_catalog.bool)`,
    },
    beginBatch: {
      name: "begin_batch",
      text:
        `SELECT item, ${BEGIN_COLS} FROM ${s}.idem_begin_batch(${t(1)}, ` +
        "$2::pg_catalog.text[], $3::pg_catalog.text[]::pg_catalog.jsonb[], " +
        `${secs(4)}, ${secs(5)}, ${t(6)}, ${t(7)}, ` +
        "$8::pg_catalog.text[]::pg_catalog.uuid[]) ORDER BY item",
    },
    complete: {
      name: "complete",
      text:
        `SELECT state, expires_at FROM ${s}.idem_complete(${t(1)}, ${t(2)}, ` +
        `$3::pg_catalog.int8, ${j(4)}, $5::pg_catalog.bool, $6::pg_catalog.bool)`,
    },
    completeBatch: {
      name: "complete_batch",
      text:
        `SELECT item, outcome, state FROM ${s}.idem_complete_batch(${t(1)}, ` +
        "$2::pg_catalog.text[], $3::pg_catalog.int8[], " +
        "$4::pg_catalog.text[]::pg_catalog.jsonb[], $5::pg_catalog.bool[], " +
        "$6::pg_catalog.bool[]) ORDER BY item",
    },
    release: {
      name: "release",
      text: `SELECT ${s}.idem_release(${t(1)}, ${t(2)}, $3::pg_catalog.int8)`,
    },
    extend: {
      name: "extend",
      text:
        `SELECT lease_until, expires_at FROM ${s}.idem_extend(${t(1)}, ${t(2)}, ` +
        `$3::pg_catalog.int8, ${secs(4)})`,
    },
    lookup: {
      name: "lookup",
      text:
        "SELECT state, fence, attempt, upstream_key::pg_catalog.text, " +
        "response::pg_catalog.text, created_at, completed_at, lease_until, expires_at " +
        `FROM ${s}.idem_lookup(${t(1)}, ${t(2)})`,
    },
    forget: { name: "forget", text: `SELECT ${s}.idem_forget(${t(1)}, ${t(2)})` },
    purge: { name: "purge", text: `SELECT ${s}.idem_purge_expired()` },
    installed: {
      name: "installed",
      text: "SELECT pg_catalog.to_regprocedure($1::pg_catalog.text) IS NOT NULL",
    },
  };
  cache.set(schema, statements);
  return statements;
}

/** The signature check_installed looks for. */
export function beginSignature(schema: string): string {
  return (
    `${quotedSchema(schema)}.idem_begin(text, text, jsonb, interval, interval, ` +
    "text, text, interval, uuid, interval)"
  );
}

/** JSON.stringify as it is: undefined for undefined, a function or a symbol. */
export const toJson: (value: unknown, replacer?: (this: unknown, key: string, value: unknown) => unknown) => string | undefined =
  JSON.stringify;

/** Thrown inside JSON.stringify's replacer; turned into InvalidArgument by dumps. */
class NotJson extends Error {}

let sawNul = false;

// A UTF-16 surrogate without its pair: JSON.stringify escapes it (\ud800), which jsonb
// refuses; refused here instead, before anything is sent.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function checkString(text: string): void {
  if (text.includes("\0")) sawNul = true;
  if (LONE_SURROGATE.test(text)) throw new NotJson("a string holds a lone UTF-16 surrogate, which is not Unicode text");
}

function strict(this: unknown, key: string, value: unknown): unknown {
  checkString(key);
  switch (typeof value) {
    case "string":
      checkString(value);
      return value;
    case "number":
      if (!Number.isFinite(value)) throw new NotJson(`${String(value)} is not a JSON number`);
      return value;
    case "bigint":
      throw new NotJson(`a bigint (${String(value)}n) is not a JSON number`);
    case "function":
    case "symbol":
      throw new NotJson(`a ${typeof value} is not a JSON value${key ? ` (member ${JSON.stringify(key)})` : ""}`);
    default:
      break;
  }
  if (value instanceof Set) return [...(value as Set<unknown>)];
  if (value instanceof Map) {
    throw new NotJson("a Map is not a JSON value (Object.fromEntries(map) is)");
  }
  return value;
}

/**
 * Compact JSON text of a response or request. What JSON.stringify would change silently is
 * refused instead (a function, a symbol, a bigint, NaN or an infinity, a Map; a Set becomes
 * an array), and so is U+0000, which PostgreSQL's jsonb cannot hold: before anything is
 * sent. `undefined` is stored as null.
 */
export function dumps(value: unknown): string {
  sawNul = false;
  let text: string | undefined;
  try {
    // undefined for undefined (and a function, which strict refuses first)
    text = toJson(value, strict);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new InvalidArgument("the value cannot be stored as JSON", {
      detail: why.endsWith(".") ? why : `${why}.`,
      hint: "return (and take) JSON values: objects, arrays, strings, finite numbers, booleans, null",
      cause: e,
    });
  }
  // Set by strict() while JSON.stringify ran.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
  if (sawNul) {
    throw new InvalidArgument("response must not contain U+0000", {
      detail: "PostgreSQL's jsonb cannot hold the character U+0000.",
      hint: "remove or replace U+0000 in the value",
    });
  }
  return text ?? "null";
}

/** A JSON text from the server (NULL: null). */
export function loads(text: unknown): unknown {
  if (text === null || text === undefined) return null;
  if (typeof text !== "string") throw new TypeError(`JSON text expected, got a ${typeof text}`);
  return JSON.parse(text) as unknown;
}

/** NUL cannot cross the wire in a text parameter: refused before anything is sent. */
export function checkText(value: string | null | undefined, name: string): void {
  if (typeof value === "string" && value.includes("\0")) {
    throw new InvalidArgument(`${name} must not contain NUL`, {
      detail: `The ${name} holds the character U+0000.`,
      hint: `remove U+0000 from the ${name}`,
    });
  }
}
