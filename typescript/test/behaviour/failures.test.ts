/**
 * A function that throws: remembered or not (cacheFailures), and the repeats' choices
 * (onCacheHit).
 */

import assert from "node:assert/strict";

import { idempotent, RepeatRefused, ToolFailed } from "../../src/index.js";
import type { IdempotentOptions } from "../../src/index.js";
import { dbTest, Effects, one, recordOf, scopeFor, fileStore } from "../support/db.js";

const store = fileStore();

class Declined extends Error {}

type Order = { order: string };

function failing(scope: string, runs: Effects, members: IdempotentOptions<Order> = {}) {
  // A function expression, and options holding a spread: the key's parameter is typed any
  // while TypeScript infers the function's type (InputOf), and the result's type is kept.
  return idempotent(
    async function placeOrder(input: Order) {
      if (runs.add(input.order) === 1) throw new Declined("card declined");
      return Promise.resolve({ placed: input.order });
    },
    { store, scope, strategy: "explicit", key: (i) => i.order, ...members },
  );
}

dbTest("an uncached failure leaves nothing, and the retry runs", async () => {
  const scope = scopeFor("uncached");
  const runs = new Effects();
  const place = failing(scope, runs);
  await assert.rejects(place({ order: "o-1" }), Declined);
  assert.equal(await recordOf(scope, "o-1"), undefined);
  assert.deepEqual(await place({ order: "o-1" }), { placed: "o-1" });
  assert.equal(runs.count, 2);
});

dbTest("a cached failure is replayed without running", async () => {
  const scope = scopeFor("cached");
  const runs = new Effects();
  const place = failing(scope, runs, { cacheFailures: true });
  await assert.rejects(place({ order: "o-1" }), (e: unknown) => e instanceof Declined && e.message === "card declined");
  for (let i = 0; i < 2; i++) {
    await assert.rejects(place({ order: "o-1" }), (e: unknown) => {
      assert.ok(e instanceof ToolFailed);
      assert.deepEqual(e.response, { error: "card declined", type: "Declined" });
      assert.match(e.message, /card declined/);
      assert.ok(e.hint);
      return true;
    });
  }
  assert.equal(runs.count, 1);
  assert.equal((await recordOf(scope, "o-1"))?.state, "failed");
});

dbTest("returnCachedIfSuccess runs a failure again", async () => {
  const scope = scopeFor("if-success");
  const runs = new Effects();
  const place = failing(scope, runs, { cacheFailures: true, onCacheHit: "returnCachedIfSuccess" });
  await assert.rejects(place({ order: "o-1" }), Declined);
  assert.deepEqual(await place({ order: "o-1" }), { placed: "o-1" });
  assert.deepEqual(await place({ order: "o-1" }), { placed: "o-1" });
  assert.equal(runs.count, 2);
});

dbTest("failFast refuses a completed call", async () => {
  const scope = scopeFor("fail-fast");
  const runs = new Effects();
  const place = failing(scope, runs, { cacheFailures: true, onCacheHit: "failFast" });
  await assert.rejects(place({ order: "o-1" }), Declined);
  await assert.rejects(place({ order: "o-1" }), (e: unknown) => {
    assert.ok(e instanceof RepeatRefused);
    assert.equal(e.sqlstate, "IK002");
    assert.ok(e.detail && e.hint);
    return true;
  });
  assert.equal(runs.count, 1);
});

dbTest("a policy in the database governs what the wrapper leaves unset", async () => {
  const scope = scopeFor("policy");
  await one("SELECT idem_set_policy($1, cache_failures => true)", [scope]);
  const runs = new Effects();
  const place = failing(scope, runs);
  await assert.rejects(place({ order: "o-1" }), Declined);
  await assert.rejects(place({ order: "o-1" }), ToolFailed);
  // The wrapper's own setting beats the policy: that failure is not remembered.
  const runsUncached = new Effects();
  const placeUncached = failing(scope, runsUncached, { cacheFailures: false });
  await assert.rejects(placeUncached({ order: "o-2" }), Declined);
  assert.deepEqual(await placeUncached({ order: "o-2" }), { placed: "o-2" });
  assert.equal(runsUncached.count, 2);
});

dbTest("what is thrown reaches the caller unchanged, whatever it is", async () => {
  const scope = scopeFor("thrown");
  const thrown = { code: 42 };
  const f = idempotent(
    async (input: { n: number }) => {
      await Promise.resolve();
      if (input.n === 1) throw thrown; // eslint-disable-line @typescript-eslint/only-throw-error -- a caller's non-Error throw
      throw new Error(`nul \0 in the message`);
    },
    { store, scope, cacheFailures: true },
  );
  await assert.rejects(f({ n: 1 }), (e: unknown) => e === thrown);
  await assert.rejects(f({ n: 1 }), (e: unknown) => {
    assert.ok(e instanceof ToolFailed);
    assert.deepEqual(e.response, { error: '{"code":42}', type: "Object" });
    assert.match(e.message, /remembered: \{"code":42\}/);
    return true;
  });
  await assert.rejects(f({ n: 2 }), /nul/);
  await assert.rejects(f({ n: 2 }), (e: unknown) => {
    assert.ok(e instanceof ToolFailed);
    assert.deepEqual(e.response, { error: "nul \uFFFD in the message", type: "Error" });
    return true;
  });
});
