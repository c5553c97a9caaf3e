/**
 * The error classes by SQLSTATE, and what is refused before anything is sent (no database).
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import {
  Contention,
  fromSqlstate,
  GrantRoleCaller,
  IdempotencyError,
  InvalidArgument,
  LeaseLost,
  Mismatch,
  NotInstalled,
  NotPermitted,
  RepeatRefused,
  ResponseTooLarge,
  StoreUnavailable,
  Uncanonicalizable,
} from "../../src/index.js";
import { dumps, statementsIn } from "../../src/sql.js";
import type { Statement } from "../../src/sql.js";

test("every SQLSTATE of the API has its class, and keeps its detail and hint", () => {
  const cases: [string, new (...a: never[]) => IdempotencyError][] = [
    ["22023", InvalidArgument],
    ["IK001", Mismatch],
    ["IK002", RepeatRefused],
    ["IK003", LeaseLost],
    ["IK004", ResponseTooLarge],
    ["IK005", Uncanonicalizable],
    ["IK006", GrantRoleCaller],
    ["42501", NotPermitted],
    ["40001", Contention],
    ["40P01", Contention],
    ["42883", NotInstalled],
    ["3F000", NotInstalled],
    ["55000", NotInstalled],
    ["57P01", StoreUnavailable],
  ];
  for (const [code, cls] of cases) {
    const e = fromSqlstate(code, "msg", "the detail", "the hint");
    assert.ok(e instanceof cls, `${code} is ${cls.name}`);
    assert.ok(e instanceof IdempotencyError && e instanceof Error);
    assert.deepEqual([e.sqlstate, e.message, e.detail, e.hint, e.name], [code, "msg", "the detail", "the hint", cls.name]);
  }
  assert.match(String(fromSqlstate("IK001", "m", "d", "h")), /^Mismatch: m\nDETAIL: d\nHINT: h$/);
  assert.match(fromSqlstate("42883", "no function", undefined, undefined).hint ?? "", /CREATE EXTENSION/);
});

test("a class's own SQLSTATE is its instances' unless the server said another", () => {
  assert.equal(new InvalidArgument("x").sqlstate, "22023");
  assert.equal(new LeaseLost("x").sqlstate, "IK003");
  assert.equal(new StoreUnavailable("x").sqlstate, undefined);
  assert.equal(new Contention("x", { sqlstate: "40P01" }).sqlstate, "40P01");
  const cause = new Error("driver");
  assert.equal(new StoreUnavailable("x", { cause }).cause, cause);
});

test("what JSON cannot hold is refused before anything is sent", () => {
  const refused: unknown[] = [
    1n,
    { a: () => 1 },
    [Symbol("s")],
    Number.NaN,
    { n: Infinity },
    new Map([["a", 1]]),
    { a: "nul \0 here" },
    { ["k\0"]: 1 },
    "lone \uD800 surrogate",
    { ["\uDC00"]: 1 },
  ];
  for (const value of refused) {
    assert.throws(() => dumps(value), (e: unknown) => e instanceof InvalidArgument && Boolean(e.detail && e.hint));
  }
  const circular: Record<string, unknown> = {};
  circular["self"] = circular;
  assert.throws(() => dumps(circular), InvalidArgument);
});

test("JSON values are sent compact, as they are", () => {
  assert.equal(dumps({ b: [1, 2.5, "é"], a: null }), '{"b":[1,2.5,"é"],"a":null}');
  assert.equal(dumps(undefined), "null");
  assert.equal(dumps(new Set([1, 2])), "[1,2]");
  assert.equal(dumps(new Date(0)), '"1970-01-01T00:00:00.000Z"');
  assert.equal(dumps("pair \uD83D\uDE00"), '"pair \uD83D\uDE00"');
  assert.equal(dumps({ text: "a \\u0000 b" }), '{"text":"a \\\\u0000 b"}', "an escaped NUL is not a NUL");
});

test("the statements are the SQL API's, schema-qualified, with casts and seconds", () => {
  const sql = statementsIn("my schema");
  assert.match(sql.begin.text, /FROM "my schema"\.idem_begin\(\$1::pg_catalog\.text, \$2::pg_catalog\.text, \$3::pg_catalog\.text::pg_catalog\.jsonb, pg_catalog\.make_interval\(secs => \$4::pg_catalog\.float8\)/);
  assert.ok(sql.beginCall.text.includes("NULL::pg_catalog.timestamptz, NULL::pg_catalog.timestamptz,"));
  assert.ok(!sql.beginCall.text.includes("lease_until, expires_at,"));
  for (const s of Object.values(sql) as Statement[]) {
    const placeholders = [...s.text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1]));
    assert.deepEqual(placeholders, placeholders.map((_, i) => i + 1), `${s.name}: $1..$n, each once, in order`);
  }
  assert.throws(() => statementsIn(""), InvalidArgument);
});

// The Python package's statements, printed by its own module: the two packages send the
// same texts (compiled tests live in build/test/store/, four levels below the repository).
const PY_SRC = fileURLToPath(new URL("../../../../python/src", import.meta.url));
const PRINT_PY_SQL = `
import json, sys, types
pkg = types.ModuleType("pg_idempotency"); pkg.__path__ = [sys.argv[1] + "/pg_idempotency"]
sys.modules["pg_idempotency"] = pkg
from pg_idempotency import _sql
s = _sql.Statements.in_schema(sys.argv[2])
print(json.dumps({f: getattr(s, f).text for f in s.__dataclass_fields__}))
`;
const python = spawnSync("python3", ["-c", "import sys; print(sys.version_info >= (3, 10))"], { encoding: "utf8" });
const noPython =
  !existsSync(PY_SRC) ? "the Python package's sources are not beside these tests"
  : python.stdout.trim() !== "True" ? "python3 (3.10 or later) is not installed"
  : false;

test("the statements are the Python package's, word for word", { skip: noPython }, () => {
  for (const schema of ["public", 'odd "schema"']) {
    const done = spawnSync("python3", ["-c", PRINT_PY_SQL, PY_SRC, schema], { encoding: "utf8" });
    assert.equal(done.status, 0, done.stderr);
    const theirs = JSON.parse(done.stdout) as Record<string, string>;
    const ours = statementsIn(schema);
    const names: Record<string, keyof typeof ours> = {
      begin: "begin",
      begin_call: "beginCall",
      begin_batch: "beginBatch",
      complete: "complete",
      complete_call: "completeCall",
      complete_batch: "completeBatch",
      release: "release",
      extend: "extend",
      lookup: "lookup",
      forget: "forget",
      purge: "purge",
      installed: "installed",
    };
    assert.deepEqual(Object.keys(theirs).sort(), Object.keys(names).sort());
    for (const [py, ts] of Object.entries(names)) {
      assert.equal(ours[ts].text, theirs[py], `${schema}: ${py}`);
    }
  }
});
