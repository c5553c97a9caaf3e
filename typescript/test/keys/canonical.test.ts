// canonicalJson and inputHash on their own: RFC 8785's vectors, ECMAScript's number form,
// and what JSON.stringify would write that is refused here.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";

import { MAX_DEPTH, canonicalJson, inputHash } from "../../src/canonical.js";
import { IdempotencyError, InvalidArgument, Uncanonicalizable } from "../../src/errors.js";
import { HANDPICKED, javascriptOnly } from "./values.js";

// The repository's copy of RFC 8785's vectors (canon/tests/data/jcs, README there), from
// typescript/<build dir>/test/keys/.
const JCS = new URL("../../../../canon/tests/data/jcs/", import.meta.url);

test("RFC 8785's six inputs give its outputs, byte for byte", () => {
  const names = readdirSync(new URL("input/", JCS)).sort();
  assert.deepEqual(names, [
    "arrays.json", "french.json", "structures.json", "unicode.json", "values.json", "weird.json",
  ]);
  for (const name of names) {
    const input: unknown = JSON.parse(readFileSync(new URL(`input/${name}`, JCS), "utf8"));
    const expected = readFileSync(new URL(`output/${name}`, JCS));
    assert.deepEqual(Buffer.from(canonicalJson(input), "utf8"), expected, name);
    assert.equal(inputHash(input), createHash("sha256").update(expected).digest("hex"), name);
  }
});

test("a number that is not a double is one once JSON.parse has read it", () => {
  // The server keeps 333333333.33333329 (output-lossless/values.json); JSON.parse reads the
  // nearest double, whose form is RFC 8785's: what JSON.stringify sends the server.
  const lossless = readFileSync(new URL("output-lossless/values.json", JCS), "utf8");
  assert.match(lossless, /333333333\.33333329/);
  const read: unknown = JSON.parse(lossless);
  assert.equal(canonicalJson(read), readFileSync(new URL("output/values.json", JCS), "utf8"));
});

test("1,000 doubles are written as ECMAScript's Number::toString writes them", () => {
  // <IEEE-754 bits in hex>,<Number::toString>: the first 1,000 lines of RFC 8785's file.
  const lines = readFileSync(new URL("numbers/es6-1000.txt", JCS), "utf8").split("\n");
  const rows = lines.filter((line) => line !== "");
  assert.equal(rows.length, 1000);
  const bits = new DataView(new ArrayBuffer(8));
  for (const row of rows) {
    const [hex = "", expected] = row.split(",");
    bits.setBigUint64(0, BigInt(`0x${hex}`));
    const x = bits.getFloat64(0);
    assert.equal(canonicalJson(x), expected, row);
    assert.equal(canonicalJson([x]), `[${expected}]`, row);
  }
});

test("numbers at ECMAScript's thresholds", () => {
  const cases: [number, string][] = [
    [-0, "0"], [1.0, "1"], [1e20, "100000000000000000000"], [1e21, "1e+21"],
    [123456789012345680000, "123456789012345680000"], [1e-6, "0.000001"], [1e-7, "1e-7"],
    [1.5e-7, "1.5e-7"], [Number("9007199254740993"), "9007199254740992"], [1e23, "1e+23"],
    [5e-324, "5e-324"], [-1.7976931348623157e308, "-1.7976931348623157e+308"],
  ];
  for (const [x, expected] of cases) assert.equal(canonicalJson(x), expected, expected);
});

test("members are sorted by UTF-16 code units, whatever the object's own order", () => {
  assert.equal(
    canonicalJson({ "\ue000": 1, "\u{1f600}": 2, a: 3, "\u00ff": 4, A: 6, "": 7 }),
    '{"":7,"A":6,"a":3,"\u00ff":4,"\u{1f600}":2,"\ue000":1}',
  );
  // An object lists integer-like names first, in numeric order: "9" before "10".
  assert.equal(canonicalJson({ a: 1, "10": 2, "9": 3, "1": 4 }), '{"1":4,"10":2,"9":3,"a":1}');
  assert.equal(canonicalJson({ b: { d: 1, c: [{ f: 1, e: 2 }] }, a: null }),
    '{"a":null,"b":{"c":[{"e":2,"f":1}],"d":1}}');
});

test("strings are escaped as RFC 8785 escapes them", () => {
  assert.equal(
    canonicalJson("q\"b\\\n\r\t\b\f\x01\x1f\x7f/\u2028\u{1f600}"),
    '"q\\"b\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\x7f/\u2028\u{1f600}"',
  );
});

test("a value is read as JSON.stringify reads it", () => {
  for (const value of [...HANDPICKED, ...javascriptOnly()]) {
    const text = JSON.stringify(value);
    assert.equal(canonicalJson(value), canonicalJson(JSON.parse(text)), text);
  }
  assert.equal(canonicalJson({ kept: 1, gone: undefined }), '{"kept":1}');
  assert.equal(canonicalJson([undefined, 1]), "[null,1]");
  assert.equal(canonicalJson({ when: new Date(Date.UTC(2026, 0, 2)) }),
    '{"when":"2026-01-02T00:00:00.000Z"}');
  assert.equal(canonicalJson({ m: { toJSON: (key: string) => key } }), '{"m":"m"}');
  // A program that gives bigints a toJSON has them written by it, as JSON.stringify does.
  const bigints = BigInt.prototype as { toJSON?: (this: bigint) => string };
  bigints.toJSON = function () {
    return this.toString();
  };
  try {
    assert.equal(canonicalJson({ id: 12n }), JSON.stringify({ id: 12n }));
    assert.equal(canonicalJson({ id: 12n }), '{"id":"12"}');
  } finally {
    delete bigints.toJSON;
  }
});

test("a Set is its items, and undefined as the whole value is null", () => {
  // JSON.stringify writes {} for every Set, and nothing at all for undefined.
  assert.equal(canonicalJson({ tags: new Set(["b", "a"]) }), '{"tags":["b","a"]}');
  assert.equal(canonicalJson(new Set()), "[]");
  assert.equal(canonicalJson(undefined), "null");
  assert.equal(canonicalJson({ toJSON: () => undefined }), "null");
  assert.equal(inputHash(undefined), inputHash(null));
});

test("what JSON.stringify would drop, write as null or {}, or throw on is refused", () => {
  const refused: [unknown, RegExp][] = [
    [{ a: Number.NaN }, /the number NaN/],
    [[Number.POSITIVE_INFINITY], /the number Infinity/],
    [-Infinity, /the number -Infinity/],
    [new Number(Number.NaN), /the number NaN/],
    [{ id: 12n }, /a bigint \(at "id"\)/],
    [Object(12n), /a bigint/],
    [new Map([["a", 1]]), /a Map/],
    [() => 1, /a function/],
    [{ send: () => 1 }, /a function \(at "send"\)/],
    [[Symbol("s")], /a symbol \(at "0"\)/],
    [{ toJSON: () => Symbol("s") }, /a symbol/],
  ];
  for (const [value, detail] of refused) {
    assert.throws(() => inputHash(value), (e: unknown) => {
      assert.ok(e instanceof InvalidArgument, String(e));
      assert.equal(e.sqlstate, "22023");
      assert.match(e.detail ?? "", detail);
      assert.ok(e.hint);
      return true;
    });
  }
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic["self"] = [cyclic];
  assert.throws(() => inputHash(cyclic), (e: unknown) =>
    e instanceof InvalidArgument && /cycle/.test(e.detail ?? ""));
  // The same object twice is not a cycle.
  const shared = { x: 1 };
  assert.equal(canonicalJson([shared, { shared }]), '[{"x":1},{"shared":{"x":1}}]');
});

test("U+0000 is refused, in a value or a member name", () => {
  for (const value of ["a\0b", { "\0": 1 }, [{ s: "\0" }]]) {
    assert.throws(() => inputHash(value), (e: unknown) =>
      e instanceof InvalidArgument && /U\+0000/.test(e.message));
  }
});

test("a lone surrogate has no canonical form; a pair has one", () => {
  for (const value of [{ a: "\ud800" }, { "\udfff": 1 }, ["x\ud83d"], "\ude00y"]) {
    assert.throws(() => inputHash(value), (e: unknown) =>
      e instanceof Uncanonicalizable && e.sqlstate === "IK005" && /surrogate/.test(e.detail ?? ""));
  }
  assert.equal(canonicalJson("\ud83d\ude00"), '"\u{1f600}"');
});

test("nesting is refused beyond the server's 128 levels", () => {
  assert.equal(MAX_DEPTH, 128);
  let ok: unknown = 1;
  let text = "1";
  for (let i = 0; i < 128; i++) {
    ok = i % 2 === 0 ? [ok] : { k: ok };
    text = i % 2 === 0 ? `[${text}]` : `{"k":${text}}`;
  }
  assert.equal(canonicalJson(ok), text);
  assert.throws(() => canonicalJson([ok]), (e: unknown) =>
    e instanceof Uncanonicalizable && /deeper than 128 levels/.test(e.detail ?? ""));
  assert.throws(() => canonicalJson({ deep: ok }), Uncanonicalizable);
});

test("the errors are the package's", () => {
  assert.throws(() => inputHash(Number.NaN), IdempotencyError);
  assert.throws(() => inputHash("\ud800"), IdempotencyError);
});

test("inputHash is the lowercase hex SHA-256 of the canonical text's UTF-8", () => {
  const value = { "\u00e9": "\u{1f600}", a: [1.5, true] };
  const text = '{"a":[1.5,true],"\u00e9":"\u{1f600}"}';
  assert.equal(canonicalJson(value), text);
  assert.equal(inputHash(value), createHash("sha256").update(Buffer.from(text, "utf8")).digest("hex"));
  assert.match(inputHash(value), /^[0-9a-f]{64}$/);
  assert.equal(inputHash({ b: 2, a: 1 }), inputHash({ a: 1.0, b: 2 }));
});
