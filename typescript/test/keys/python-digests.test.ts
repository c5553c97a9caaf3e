// inputHash and agentKey give what the Python package's input_hash and agent_key give for
// the same values, so that a TypeScript tool and a Python tool of the same name and input
// share keys.
//
// fixtures/python-digests.json holds the Python package's answers (python/src at the
// commit that added it) for HANDPICKED and generated(1, 100) of values.ts, written by
// fixtures/make-python-digests.py. A JavaScript number is a double, so that program reads
// every number as a float: the double JavaScript holds. Made from typescript/, after
// compiling, with the repository's development virtualenv (target/pydev):
//
//   node -e 'import("./build-keys/test/keys/values.js").then((v) => console.log(JSON.stringify(
//     [...v.HANDPICKED, ...v.generated(1, 100)].map((x) => JSON.stringify(x)))))' |
//   ../target/pydev/bin/python test/keys/fixtures/make-python-digests.py \
//     > test/keys/fixtures/python-digests.json

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { agentKey } from "../../src/agent-keys.js";
import { canonicalJson, inputHash } from "../../src/canonical.js";
import { HANDPICKED, generated } from "./values.js";

interface Fixture {
  cases: { json: string; canonical: string; hash: string }[];
  agentKeys: { runId: string; tool: string; json: string; key: string }[];
}

const fixture = JSON.parse(
  readFileSync(new URL("../../../test/keys/fixtures/python-digests.json", import.meta.url), "utf8"),
) as Fixture;

test("the fixture holds the values of values.ts", () => {
  const values = [...HANDPICKED, ...generated(1, 100)];
  assert.equal(fixture.cases.length, values.length);
  for (const [i, c] of fixture.cases.entries()) {
    assert.equal(c.json, JSON.stringify(values[i]), `value ${i}`);
  }
});

test("canonicalJson and inputHash are the Python package's", () => {
  for (const [i, c] of fixture.cases.entries()) {
    const value: unknown = JSON.parse(c.json);
    assert.equal(canonicalJson(value), c.canonical, `value ${i}: ${c.json}`);
    assert.equal(inputHash(value), c.hash, `value ${i}: ${c.json}`);
  }
});

test("agentKey is the Python package's agent_key", () => {
  assert.ok(fixture.agentKeys.length >= 5);
  for (const k of fixture.agentKeys) {
    assert.equal(agentKey(k.runId, k.tool, JSON.parse(k.json)), k.key, k.json);
  }
});
